"""Triage: in which phase a vLLM deployment failed, with the lines that prove it."""

from __future__ import annotations

import os
from collections.abc import Iterable

from oomkit import __version__
from oomkit.logs import ReadStats, Record, iter_records
from oomkit.triage.engine import Triage as _Engine
from oomkit.triage.fast import scan_key
from oomkit.triage.model import Evidence, Facts, TimelineEntry, TriageResult, Verdict
from oomkit.triage.prefilter import PeriodicLines
from oomkit.triage.verdict import decide

__all__ = ["Evidence", "Facts", "TimelineEntry", "Triage", "TriageResult", "Verdict", "analyse"]


class Triage(_Engine):
    """Incremental triage: `feed(record)` in log order, `result()` at any time."""

    def __init__(self, inputs: Iterable[str] = ()) -> None:
        super().__init__()
        self.inputs = tuple(inputs)
        self.read = ReadStats()

    def result(self) -> TriageResult:
        f = self.facts
        facts = Facts(
            vllm_version=f.version,
            engine=f.engine,
            model=f.model,
            args=dict(f.args),
            figures=dict(f.figures),
            evidence=dict(f.evidence),
            stats=f.stats.summary(),
            starts=self.starts,
        )
        warnings = list(self.read.warnings)
        if self.read.decode_errors:
            warnings.append(f"{self.read.decode_errors} line(s) were not valid UTF-8; odd bytes were replaced")
        if self.read.truncated_lines:
            warnings.append(f"{self.read.truncated_lines} line(s) longer than 64 KiB were cut")
        return TriageResult(
            oomkit_version=__version__,
            inputs=self.inputs,
            verdict=decide(self),
            timeline=tuple(self.state.timeline),
            facts=facts,
            warnings=tuple(warnings),
            lines_read=self.read.lines or self.records,
        )


def analyse(paths: Iterable[str]) -> TriageResult:
    """Triage log files, folders (ranks merged in time order), .gz files or "-" (stdin)."""
    paths = list(paths)
    t = Triage(paths)
    periodic = PeriodicLines()
    for rec in iter_records(paths, key=scan_key(), stats=t.read, gaps=periodic, jobs=os.cpu_count() or 1):
        t.feed(rec, prefiltered=True)
    t.facts.stats.add_bulk(periodic.skipped_stats, periodic.peaks)
    return t.result()


def analyse_records(records: Iterable[Record], inputs: Iterable[str] = ("-",)) -> TriageResult:
    t = Triage(inputs)
    for rec in records:
        t.feed(rec)
    return t.result()
