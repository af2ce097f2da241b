"""One ladder step's row: what the table and `--json` show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from oomkit.fsio import from_fields, json_list, json_object
from oomkit.loadrun.engine import Window
from oomkit.loadrun.failure import Failure
from oomkit.loadrun.stats import percentile
from oomkit.serial import JsonObject


class ContextLimit(TypedDict, total=False):
    """The history-doubling step's finding (its detail's `context`, and poc.json's context_limit_*);
    read back from steps.jsonl on --resume, so every key may be missing."""

    found: bool
    limit_tokens: int | None
    largest_ok_prompt_tokens: int | None


@dataclass(frozen=True)
class StepResult:
    name: str
    ok: bool
    phase: str
    """The failure's phase; cache_pressure when preemptions were seen; healthy otherwise."""
    peak_memory_bytes: int | None
    max_kv_usage: float | None
    preemptions: float | None
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    latency_ms_p95: float | None
    errors: int
    requests: int
    duration_s: float
    notes: tuple[str, ...] = ()
    detail: JsonObject = field(default_factory=dict)
    failure: Failure | None = None

    @property
    def server_died(self) -> bool:
        return server_died(self.failure)

    def to_dict(self) -> JsonObject:
        r = _round
        return {
            "name": self.name,
            "ok": self.ok,
            "phase": self.phase,
            "peak_memory_bytes": self.peak_memory_bytes,
            "max_kv_usage": r(self.max_kv_usage),
            "preemptions": r(self.preemptions),
            "ttft_ms_p50": r(self.ttft_ms_p50),
            "ttft_ms_p95": r(self.ttft_ms_p95),
            "latency_ms_p95": r(self.latency_ms_p95),
            "errors": self.errors,
            "requests": self.requests,
            "duration_s": r(self.duration_s),
            "notes": list(self.notes),
            "detail": self.detail,
            "failure": self.failure.to_dict() if self.failure else None,
        }

    @classmethod
    def from_dict(cls, d: JsonObject) -> StepResult:
        """A steps.jsonl line (or a step of ladder.json) as the StepResult that wrote it."""
        failure = d.get("failure")
        return from_fields(
            cls,
            d,
            notes=tuple(str(n) for n in json_list(d.get("notes"))),
            detail=dict(json_object(d.get("detail"))),
            failure=from_fields(Failure, failure) if isinstance(failure, dict) else None,
        )


def server_died(failure: Failure | None) -> bool:
    """The server (or its engine) died under the step: that is no measurement of the step, and
    `--resume` runs it again on a new server (loadrun.failure calls every such death engine_dead)."""
    return failure is not None and failure.kind == "engine_dead"


N = TypeVar("N", int, float)


def _round(v: float | None) -> float | None:
    return round(v, 3) if isinstance(v, float) else v


def _max(values: list[N | None]) -> N | None:
    seen = [v for v in values if v is not None]
    return max(seen) if seen else None


def _sum(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def from_windows(
    name: str,
    windows: list[Window],
    ok: bool,
    failure: Failure | None = None,
    notes: tuple[str, ...] = (),
    detail: JsonObject | None = None,
) -> StepResult:
    records = [r for w in windows for r in w.records]
    good = [r for r in records if r.ok]
    ttft = [r.ttft_ms for r in good if r.ttft_ms is not None]
    latency = [r.latency_ms for r in good if r.latency_ms is not None]
    preemptions = _sum([w.deltas.preemptions for w in windows])
    phase = failure.phase if failure else ("cache_pressure" if preemptions else "healthy")
    return StepResult(
        name=name,
        ok=ok and failure is None,
        phase=phase,
        peak_memory_bytes=_max([w.peak_memory_bytes for w in windows]),
        max_kv_usage=_max([w.deltas.max_kv_usage for w in windows]),
        preemptions=preemptions,
        ttft_ms_p50=percentile(ttft, 50),
        ttft_ms_p95=percentile(ttft, 95),
        latency_ms_p95=percentile(latency, 95),
        errors=len(records) - len(good),
        requests=len(records),
        duration_s=sum(w.duration_s for w in windows),
        notes=notes,
        detail=detail or {},
        failure=failure,
    )
