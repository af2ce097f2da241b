"""What a forecast computed: per concurrency rung the figures `oomkit ladder` measures, the knee
with the ladder's meaning, per layout, and how it was computed. Every figure is a forecast."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oomkit.loadrun.knee import Knee

REGIMES = ("free", "queueing", "preempting", "thrashing", "failing")
RELIABILITY_WARNING = (
    "preempting/thrashing rungs are where a forecast is least reliable: the order of recomputation and "
    "the step time under a full pool are the least certain parts of the model"
)


def _round(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v


@dataclass(frozen=True)
class RungForecast:
    concurrency: int
    verdict: str
    """ok, preemption, slo or failure (the ladder's rung verdicts); cut when a limit stopped it."""
    regime: str
    requests: int
    errors: int
    preemptions: int
    max_kv_usage: float
    waiting_max: int
    prefix_hit_rate: float | None
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    itl_ms_p50: float | None
    itl_ms_p95: float | None
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    output_tokens_per_s: float | None
    slo_attainment: float | None
    simulated_s: float
    steps: int
    wall_s: float
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_dict(self) -> dict[str, Any]:
        out = {k: _round(v) for k, v in self.__dict__.items()}
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class LayoutForecast:
    layout: str
    engines: int
    """DP engines; each runs its own vLLM scheduler behind vLLM's DP router."""
    plan: dict[str, Any]
    engine: dict[str, Any]
    rungs: tuple[RungForecast, ...]
    knee: Knee
    notes: tuple[str, ...] = ()
    step_time: dict[str, Any] = field(default_factory=dict)
    """This layout's step-time model (a roofline differs per layout; a calibration does not)."""
    error: str | None = None
    """Why the planner refused this layout (with --layouts); it then has no rungs."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "engines": self.engines,
            "plan": self.plan,
            "engine": self.engine,
            "rungs": [r.to_dict() for r in self.rungs],
            "knee": self.knee.to_dict(),
            "notes": list(self.notes),
            "step_time": self.step_time,
            "error": self.error,
        }


@dataclass(frozen=True)
class Forecast:
    step_time_model: str
    step_time: dict[str, Any]
    traffic: dict[str, Any]
    layouts: tuple[LayoutForecast, ...]
    vllm: dict[str, str]
    wall_s: float
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "forecast": True,
            "step_time_model": self.step_time_model,
            "step_time": self.step_time,
            "traffic": self.traffic,
            "vllm": self.vllm,
            "layouts": [lay.to_dict() for lay in self.layouts],
            "wall_s": round(self.wall_s, 3),
            "notes": list(self.notes),
        }


def knee_of(rungs: list[RungForecast]) -> Knee:
    """The ladder's knee over rungs in the order run: the lowest concurrency that went bad, the
    highest good one below it; `limit` when none went bad, `cut` when a limit stopped the rungs."""
    bad = [r for r in rungs if r.verdict not in ("ok", "cut")]
    if bad:
        first = min(bad, key=lambda r: r.concurrency)
        good = [r.concurrency for r in rungs if r.ok and r.concurrency < first.concurrency]
        return Knee(first.concurrency, first.verdict, max(good) if good else None)
    good = [r.concurrency for r in rungs if r.ok]
    reason = "cut" if any(r.verdict == "cut" for r in rungs) else "limit"
    return Knee(None, reason, max(good) if good else None)


def regime_of(requests: int, errors: int, preemptions: int, waiting_max: int) -> str:
    if errors:
        return "failing"
    if preemptions > max(1, requests):  # on average more than one recomputation per request
        return "thrashing"
    if preemptions:
        return "preempting"
    return "queueing" if waiting_max else "free"
