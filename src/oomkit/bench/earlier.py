"""What earlier attempts of a bench finished, read back from its folder for `--resume`: the
sessions that ended (sessions.jsonl) with their requests, the server's /metrics, memory and time,
so the resumed summary covers every attempt."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.client.records import RequestRecord
from oomkit.fsio import from_fields, json_object
from oomkit.loadrun.engine import SessionOutcome, Window
from oomkit.loadrun.resume import attempt_of, record_from_dict
from oomkit.metrics.deltas import MetricDeltas, compute
from oomkit.metrics.scrape import Scrape
from oomkit.rundir import RunDir
from oomkit.serial import Json

SESSIONS_FILE = "sessions.jsonl"


@dataclass(frozen=True)
class Earlier:
    """What earlier attempts of a bench finished, counted again in the resumed summary: the
    sessions that ended (not cut) with their requests, the server's /metrics, memory, time."""

    outcomes: tuple[SessionOutcome, ...] = ()
    records: tuple[RequestRecord, ...] = ()
    scrapes: tuple[Scrape, ...] = ()
    peak_memory_bytes: int | None = None
    duration_s: float = 0.0

    @property
    def finished(self) -> frozenset[int]:
        return frozenset(o.session for o in self.outcomes)

    def totals(
        self, window: Window, scrapes: list[Scrape]
    ) -> tuple[tuple[RequestRecord, ...], MetricDeltas, int | None, float]:
        """Records, /metrics deltas, peak memory and time under load over every attempt. Counters
        that restarted with a new server count from the reset (metrics.deltas)."""
        if not self.outcomes and not self.scrapes:
            return window.records, window.deltas, window.peak_memory_bytes, window.duration_s
        peaks = [p for p in (self.peak_memory_bytes, window.peak_memory_bytes) if p is not None]
        return (
            self.records + window.records,
            compute(list(self.scrapes) + scrapes),
            max(peaks, default=None),
            self.duration_s + window.duration_s,
        )


def read_earlier(run: RunDir, label: str = "bench") -> Earlier:
    finished: dict[int, int] = {}  # session index in the run -> the attempt that finished it
    outcomes = []
    for line in run.read_jsonl(SESSIONS_FILE):
        index = line.get("session")
        if isinstance(index, int) and not line.get("cut") and index not in finished:
            finished[index] = attempt_of(line)
            outcomes.append(from_fields(SessionOutcome, line))
    spans: dict[int, list[float]] = {}
    records = []
    for line in run.read_jsonl("requests.jsonl"):
        rec = record_from_dict(line) if line.get("label") == label else None
        if rec is not None:
            spans.setdefault(attempt_of(line), []).extend(
                (rec.started_unix_s, rec.started_unix_s + (rec.latency_ms or 0.0) / 1000)
            )
            run_session = line.get("run_session")
            if isinstance(run_session, int) and finished.get(run_session) == attempt_of(line):
                records.append(rec)
    scrapes = []
    for line in run.read_jsonl("metrics.jsonl"):
        t_unix_s = line.get("t_unix_s")
        if line.get("label") == label and not line.get("error") and isinstance(t_unix_s, int | float):
            scrapes.append(Scrape(float(t_unix_s), _samples(line.get("samples")), label=label))
            spans.setdefault(attempt_of(line), []).append(float(t_unix_s))
    peaks = [
        total
        for line in run.read_jsonl("load_memory.jsonl")
        if line.get("label") == label and isinstance(total := line.get("total_bytes"), int)
    ]
    duration = sum(max(t) - min(t) for t in spans.values())
    return Earlier(tuple(outcomes), tuple(records), tuple(scrapes), max(peaks, default=None), duration)


def _samples(value: Json | None) -> dict[str, float]:
    """A metrics.jsonl line's samples (name -> value, as the scraper wrote them)."""
    return {k: float(v) for k, v in json_object(value).items() if isinstance(v, int | float)}
