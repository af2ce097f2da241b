"""One Verdict from its parts: the evidence lines (first the hits that decided it), and the advice."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.triage.advice import advice_for
from oomkit.triage.engine import Triage
from oomkit.triage.model import DecidedBy, Evidence, Verdict
from oomkit.triage.state import Hit

MAX_EVIDENCE = 6
# An out-of-memory verdict whose phase nothing in the log placed (a lone OOM line, read by its figures or the likeliest
# phase): the steps for that phase are the likeliest ones, and the method's first step is to find the phase.
GUESSED_PHASE = (
    "Nothing in this log places the failure: the phase above is the likeliest one, not a known one. Give oomkit the "
    "whole log (from its first line, all ranks) to place it before acting on the steps below."
)


def wrapper_hits(hits: list[Hit]) -> list[Hit]:
    return [h for h in hits if h.rule.cls == "wrapper"]


@dataclass(frozen=True)
class Conclusion:
    """What a verdict says, before its evidence is attached."""

    phase: str
    is_oom: bool
    confidence: str
    reason: str
    summary: str
    cause: str | None


def make_verdict(
    said: Conclusion,
    support: list[Hit],
    t: Triage | None = None,
    extra: list[Evidence] | None = None,
    decided_by: DecidedBy = "context",
) -> Verdict:
    phase, summary = said.phase, said.summary
    evidence: list[Evidence] = []
    for h in support:
        if h.evidence not in evidence:
            evidence.append(h.evidence)
    for ev in extra or []:
        if ev not in evidence and ev.text:
            evidence.append(ev)
    if t is not None and "estimated_max_model_len" in t.facts.figures and phase == "kv_cache_allocation":
        summary += f"; vLLM estimates the maximum length that fits at {t.facts.figures['estimated_max_model_len']}"
    return Verdict(
        phase=phase,
        is_oom=said.is_oom,
        confidence=said.confidence,
        confidence_reason=said.reason,
        summary=summary,
        cause=said.cause,
        evidence=tuple(evidence[:MAX_EVIDENCE]),
        advice=(GUESSED_PHASE, *advice_for(phase)) if _guessed(said, decided_by) else advice_for(phase),
        decided_by=decided_by,
    )


def _guessed(said: Conclusion, decided_by: DecidedBy) -> bool:
    return said.is_oom and said.confidence == "low" and decided_by == "context"
