"""What earlier attempts of a ladder finished, read back from its folder for `--resume`: the steps
of steps.jsonl, the concurrency rungs of rungs.jsonl with their requests (so the concurrency
step's figures still cover every rung), and the requests steps 1-3 sent (the repeat step sends
them again). Only lines that are whole count; a half-written last line is skipped. A step the
server died under is recorded but not finished: it runs again."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import cast

from oomkit.client.records import RequestRecord
from oomkit.fsio import from_fields, json_object
from oomkit.ladder.result import ContextLimit, StepResult
from oomkit.loadrun.engine import Window
from oomkit.loadrun.knee import Knee, Rung
from oomkit.loadrun.resume import attempt_of, record_from_dict
from oomkit.metrics.deltas import MetricDeltas
from oomkit.rundir import RunDir
from oomkit.serial import Json, JsonObject
from oomkit.workload.requestset import RequestSet, SetRequest

STEPS_FILE, RUNGS_FILE = "steps.jsonl", "rungs.jsonl"
SENT_STEPS = ("short_request", "tool_call", "agent_steps")


@dataclass(frozen=True)
class Done:
    steps: dict[str, StepResult] = field(default_factory=dict)
    """Finished steps by name, in the order they ran."""
    rungs: dict[int, tuple[Rung, Window]] = field(default_factory=dict)
    sent: dict[str, list[tuple[SetRequest, RequestRecord]]] = field(default_factory=dict)
    context: ContextLimit = field(default_factory=lambda: ContextLimit())
    knee: Knee | None = None

    def kept(self) -> str:
        rungs = ", ".join(f"c{c}" for c in self.rungs)
        return f"kept steps: {', '.join(self.steps) or 'none'}" + (f"; kept rungs: {rungs}" if rungs else "")


def window_line(rung: Rung, window: Window, attempt: int) -> JsonObject:
    """The rungs.jsonl line of a finished rung: its verdict and what its window measured."""
    return {
        "attempt": attempt,
        **rung.to_dict(),
        "window": {
            "label": window.label,
            "deltas": window.deltas.to_dict(),
            "peak_memory_bytes": window.peak_memory_bytes,
            "started_unix_s": window.started_unix_s,
            "duration_s": window.duration_s,
        },
    }


def read_done(run: RunDir, rs: RequestSet) -> Done:
    records: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    for line in run.read_jsonl("requests.jsonl"):
        rec = record_from_dict(line)
        if rec is not None:
            records[(rec.label, attempt_of(line))].append(rec)
    steps: dict[str, tuple[StepResult, int]] = {}
    for line in run.read_jsonl(STEPS_FILE):
        name = line.get("name")
        if isinstance(name, str) and name not in steps:
            step = StepResult.from_dict(line)
            if not step.server_died:  # the server died under it: no result, it runs again
                steps[name] = (step, attempt_of(line))
    by_id = {r.id: r for r in rs.requests}
    sent = {
        name: [(by_id[r.request_id], r) for r in records[(name, attempt)] if r.request_id in by_id]
        for name, (_, attempt) in steps.items()
        if name in SENT_STEPS
    }
    done = {name: step for name, (step, _) in steps.items()}
    history = done.get("history_doubling")
    concurrency = done.get("concurrency")
    recorded_knee = concurrency.detail.get("knee") if concurrency else None
    knee = Knee.from_dict(recorded_knee) if isinstance(recorded_knee, dict) else None
    rungs = {} if concurrency else _rungs(run, records)
    context = history.detail.get("context") if history else None
    # The dict history_doubling recorded: a ContextLimit as JSON.
    found = cast(ContextLimit, dict(context)) if isinstance(context, dict) else ContextLimit()
    return Done(done, rungs, sent, found, knee)


def _rungs(run: RunDir, records: dict[tuple[str, int], list[RequestRecord]]) -> dict[int, tuple[Rung, Window]]:
    out: dict[int, tuple[Rung, Window]] = {}
    for line in run.read_jsonl(RUNGS_FILE):
        w = json_object(line.get("window"))
        c, label, peak = line.get("concurrency"), w.get("label"), w.get("peak_memory_bytes")
        if not isinstance(c, int) or c in out or "label" not in w:
            continue
        deltas = from_fields(MetricDeltas, json_object(w.get("deltas") or {"scrapes": 0}))
        window = Window(
            str(label),
            tuple(records[(str(label), attempt_of(line))]),
            deltas,
            peak if isinstance(peak, int) else None,
            _seconds(w.get("started_unix_s")),
            _seconds(w.get("duration_s")),
        )
        out[c] = (Rung(c, str(line.get("verdict")), json_object(line.get("detail"))), window)
    return out


def _seconds(value: Json | None) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
