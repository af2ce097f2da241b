"""What a decision rule returns, and what it is given: shared by the rule families
(`failure_rules`, `capacity_rules`) and the table in `rules`, so none imports another."""

from __future__ import annotations

from dataclasses import dataclass, field

from oomkit.decide.checklist import Item
from oomkit.decide.documents import LaunchVerdict, SourceEvidence
from oomkit.decide.model import EvidenceDoc, Numbers, Verdict
from oomkit.decide.teams import Team


@dataclass(frozen=True)
class Fired:
    verdict: Verdict
    summary: str
    numbers: Numbers = field(default_factory=Numbers)
    evidence: tuple[EvidenceDoc, ...] = ()
    recommendations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ctx:
    team: Team
    criteria: list[Item]


def cited(run_path: str, evidence: list[SourceEvidence]) -> tuple[EvidenceDoc, ...]:
    """A failure's evidence, each piece with the run folder it was recorded in."""
    return tuple([{"run": run_path, **e} for e in evidence])


def log_lines(run_path: str, verdict: LaunchVerdict) -> tuple[EvidenceDoc, ...]:
    """The first log lines a launch verdict cites: four are enough to find the failure, more bury it."""
    return tuple(
        {"run": run_path, "file": e.get("file"), "line": e.get("line"), "text": e.get("text")}
        for e in (verdict.get("evidence") or [])[:4]
    )
