"""What a forecast computed: per concurrency rung the figures `oomkit ladder` measures, the knee
with the ladder's meaning, per layout, and how it was computed. Every figure is a forecast."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Required, TypedDict

from oomkit.forecast.engine import EngineSettings
from oomkit.forecast.minutes import MinuteForecast
from oomkit.forecast.steptime import StepTimeModel
from oomkit.loadrun.knee import Knee
from oomkit.serial import Json, JsonObject, to_json_object

REGIMES = ("free", "queueing", "preempting", "thrashing", "failing")
RELIABILITY_WARNING = (
    "preempting/thrashing rungs are where a forecast is least reliable: the order of recomputation and "
    "the step time under a full pool are the least certain parts of the model"
)


def _round(v: Json) -> Json:
    return round(v, 3) if isinstance(v, float) else v


class PlanSummary(TypedDict, total=False):
    """A layout's plan as the forecast states it; a layout that does not load has the first three."""

    model: Required[str]
    gpu: Required[str]
    gpus: Required[int | None]
    vllm_accounting: str
    num_blocks: int
    block_size: int
    kv_cache_tokens: int
    vllm_kv_cache_tokens: int
    """vLLM's own get_kv_cache_capacity on the built config, next to the plan's kv_cache_tokens."""
    kv_groups: list[str]
    scheduler_block_size: int
    hash_block_size: int


@dataclass(frozen=True)
class TrafficSummary:
    name: str
    source: str
    sessions: int
    steps_per_session: int
    ignore_eos: bool


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
    """vLLM's kv_cache_usage after every step: the true peak (of the fullest engine)."""
    max_kv_usage_sampled: float
    """What /metrics scraped once a second would show as the peak (forecast.scrape): the figure
    comparable to a ladder's or bench's measured max_kv_usage."""
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
    minutes: tuple[MinuteForecast, ...] = ()
    """Per minute of the window (`--sessions N --window W` only; empty for concurrency rungs)."""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_dict(self) -> JsonObject:
        out = {k: _round(v) for k, v in to_json_object(self).items() if k != "minutes"}
        if self.minutes:
            out["minutes"] = [m.to_dict() for m in self.minutes]
        return out


@dataclass(frozen=True)
class LayoutForecast:
    layout: str
    engines: int
    """DP engines; each runs its own vLLM scheduler behind vLLM's DP router."""
    plan: PlanSummary
    engine: EngineSettings | None
    """What its schedulers run with; None when it does not load."""
    rungs: tuple[RungForecast, ...]
    knee: Knee
    notes: tuple[str, ...] = ()
    step_time: StepTimeModel | None = None
    """This layout's step-time model (a roofline differs per layout; a calibration does not)."""
    error: str | None = None
    """Why the planner refused this layout (with --layouts); it then has no rungs."""
    scheduler: str | None = None
    """The class its engines run: vLLM's own Scheduler."""

    def to_dict(self) -> JsonObject:
        engine: JsonObject = {**self.engine.to_dict(), "scheduler": self.scheduler} if self.engine else {}
        return {
            "layout": self.layout,
            "engines": self.engines,
            "plan": to_json_object(self.plan),
            "engine": engine,
            "rungs": [r.to_dict() for r in self.rungs],
            "knee": self.knee.to_dict(),
            "notes": list(self.notes),
            "step_time": self.step_time.to_dict() if self.step_time else {},
            "error": self.error,
        }


@dataclass(frozen=True)
class Forecast:
    step_time_model: str
    step_time: StepTimeModel
    traffic: TrafficSummary
    layouts: tuple[LayoutForecast, ...]
    vllm: dict[str, str]
    wall_s: float
    notes: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {
            "forecast": True,
            "step_time_model": self.step_time_model,
            "step_time": self.step_time.to_dict(),
            "traffic": to_json_object(self.traffic),
            "vllm": to_json_object(self.vllm),
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
