"""Typed results of triage. Frozen dataclasses; `to_dict()` gives the stable JSON shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from oomkit.redact import redact, redact_obj
from oomkit.serial import JsonObject

FigureValue = float | int | str
"""A figure the log printed: a number (GiB, tokens, x) or, for the KV cache's device, its name."""


class StatsSummary(TypedDict, total=False):
    """The periodic stats lines, aggregated (empty when the log has none)."""

    samples: int
    max_kv_usage_pct: float | None
    max_running: float | None
    max_waiting: float | None
    preemptions: float
    full_kv_samples: int
    last_prefix_hit_pct: float | None
    last: dict[str, float]


@dataclass(frozen=True)
class Evidence:
    file: str
    line: int
    text: str

    def to_dict(self) -> JsonObject:
        return {"file": self.file, "line": self.line, "text": redact(self.text)}

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TimelineEntry:
    phase: str
    file: str
    line: int
    time: str | None

    def to_dict(self) -> JsonObject:
        return {"phase": self.phase, "file": self.file, "line": self.line, "time": self.time}


DecidedBy = Literal["frames", "marker", "template", "context"]


@dataclass(frozen=True)
class Verdict:
    phase: str
    is_oom: bool
    confidence: str  # high | medium | low
    confidence_reason: str
    summary: str
    cause: str | None  # id of the failure rule that decided, e.g. "E-MAXLEN"
    evidence: tuple[Evidence, ...]
    advice: tuple[str, ...]
    decided_by: DecidedBy = "context"
    """Which step of the decision order placed the phase (docs/triage.md): the failing traceback's
    frames, the last start-up marker reached, the failure message's own template, or the context
    (stats lines, printed figures, nothing at all)."""

    def to_dict(self) -> JsonObject:
        return {
            "phase": self.phase,
            "is_oom": self.is_oom,
            "confidence": self.confidence,
            "confidence_reason": self.confidence_reason,
            "summary": redact(self.summary),
            "cause": self.cause,
            "decided_by": self.decided_by,
            "evidence": [e.to_dict() for e in self.evidence],
            "advice": list(self.advice),
        }


FIGURE_KEYS = (
    "model_weights_gib",
    "available_kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens",
    "cuda_graph_gib",
)


@dataclass(frozen=True)
class Facts:
    vllm_version: str | None
    engine: str | None
    model: str | None
    args: JsonObject  # the settings the log printed, as JSON values (raw input)
    figures: dict[str, FigureValue]
    evidence: dict[str, Evidence] = field(default_factory=dict)  # figure/fact name → where it was printed
    stats: StatsSummary = field(default_factory=lambda: StatsSummary())  # periodic stats lines, aggregated
    starts: int = 1

    def to_dict(self) -> JsonObject:
        figures: JsonObject = {k: self.figures.get(k) for k in FIGURE_KEYS}
        figures.update({k: v for k, v in self.figures.items() if k not in figures})
        return {
            "vllm_version": self.vllm_version,
            "engine": self.engine,
            "model": redact(self.model) if self.model else None,
            "args": _redacted(self.args),
            "figures": figures,
            "stats": _stats_json(self.stats),
            "starts": self.starts,
            "evidence": {k: e.to_dict() for k, e in self.evidence.items()},
        }


@dataclass(frozen=True)
class TriageResult:
    oomkit_version: str
    inputs: tuple[str, ...]
    verdict: Verdict
    timeline: tuple[TimelineEntry, ...]
    facts: Facts
    warnings: tuple[str, ...] = ()
    lines_read: int = 0

    def phases_reached(self) -> list[str]:
        return [t.phase for t in self.timeline]

    def to_dict(self) -> JsonObject:
        return {
            "oomkit_version": self.oomkit_version,
            "inputs": list(self.inputs),
            "verdict": self.verdict.to_dict(),
            "timeline": [t.to_dict() for t in self.timeline],
            "facts": self.facts.to_dict(),
            "warnings": [redact(w) for w in self.warnings],
            "lines_read": self.lines_read,
        }


def _redacted(args: JsonObject) -> JsonObject:
    out = redact_obj(args)  # a JSON object stays one: redaction only masks and scans values
    return out if isinstance(out, dict) else {}


def _stats_json(stats: StatsSummary) -> JsonObject:
    out: JsonObject = {k: v for k, v in stats.items() if k != "last" and isinstance(v, int | float | None)}
    if "last" in stats:
        out["last"] = dict(stats["last"])
    return out
