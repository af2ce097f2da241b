"""Small logs for the triage tests, built from the lines and frames vLLM's (PyTorch's, CUDA's) source
prints, and the case shape those tests share (tests/test_triage_issue_kinds.py, test_triage_wrong_classes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oomkit.triage import analyse
from oomkit.triage.model import Verdict

SITE = "/usr/local/lib/python3.12/dist-packages"


def frames(prefix: str, *calls: tuple[str, str, str]) -> str:
    """CPython's traceback frames (`File "path", line N, in func` and the source line), each line
    under `prefix` (vLLM's log header, or nothing); asyncio's and concurrent's from the stdlib."""
    lines = [f"{prefix}Traceback (most recent call last):"]
    for number, (path, func, code) in enumerate(calls, start=100):
        root = "/usr/lib/python3.12" if path.startswith(("asyncio/", "concurrent/")) else SITE
        lines.append(f'{prefix}  File "{root}/{path}", line {number}, in {func}')
        lines.append(f"{prefix}    {code}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Case:
    log: str
    phase: str
    is_oom: bool
    confidence: str | None = None


def verdict_of(name: str, case: Case, where: Path) -> Verdict:
    """Triage's verdict on the case's log, written to `where`/NAME.log."""
    log = where / f"{name}.log"
    log.write_text(case.log)
    return analyse([str(log)]).verdict


def checked_verdict(name: str, case: Case, where: Path) -> Verdict:
    """The verdict, asserted to have the case's phase, is_oom and (when the case names one) confidence."""
    verdict = verdict_of(name, case, where)
    assert (verdict.phase, verdict.is_oom) == (case.phase, case.is_oom)
    if case.confidence:
        assert verdict.confidence == case.confidence
    return verdict
