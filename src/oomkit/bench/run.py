"""`bench`: target load (N concurrent agent sessions, for S sessions or D seconds), with the
client figures, the server's /metrics deltas, peak memory, agent-loop success and goodput."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from oomkit.bench.engine import Load, SessionOutcome, Window, run_async
from oomkit.bench.failure import Failure, classify
from oomkit.bench.prepare import REQUEST_SET_NOTE, TargetSpec, open_target, request_set_for, run_folder
from oomkit.bench.progress import NoProgress, Progress
from oomkit.bench.stats import ClientStats, summarise
from oomkit.bench.target import Target
from oomkit.client.chat import ClientOptions
from oomkit.errors import RunFailed, UsageError
from oomkit.fsio import write_json_atomic
from oomkit.metrics.deltas import MetricDeltas
from oomkit.rundir import RunDir, redact_obj
from oomkit.workload.requestset import RequestSet


@dataclass(frozen=True)
class BenchOptions:
    concurrency: int
    sessions: int | None = None
    """Sessions to run (the set's sessions in order, repeated if more); default: each once."""
    duration_s: float | None = None
    """Run for this long instead, repeating the sessions; requests started before the end finish."""
    slos: dict[str, float] = field(default_factory=dict)

    def check(self) -> None:
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.sessions is not None and self.duration_s is not None:
            raise UsageError("give --sessions or --duration, not both")
        if (self.sessions is not None and self.sessions < 1) or (self.duration_s is not None and self.duration_s <= 0):
            raise UsageError("--sessions and --duration must be positive")


@dataclass(frozen=True)
class AgentStats:
    sessions: int
    succeeded: int
    """Finished every step with no error and every tool call valid."""
    failed: int
    cut: int
    """Stopped by the end of the run (duration, a dead server, Ctrl-C): not counted in the share."""
    success_share: float | None

    @classmethod
    def of(cls, outcomes: list[SessionOutcome]) -> "AgentStats":
        ok = sum(o.ok for o in outcomes)
        cut = sum(o.cut for o in outcomes)
        failed = len(outcomes) - ok - cut
        judged = ok + failed
        return cls(len(outcomes), ok, failed, cut, ok / judged if judged else None)


@dataclass(frozen=True)
class BenchResult:
    run_dir: Path
    request_set_id: str
    options: BenchOptions
    duration_s: float
    client: ClientStats
    server: MetricDeltas
    agents: AgentStats
    peak_memory_bytes: int | None
    memory_source: str
    failure: Failure | None
    died: bool
    """The server stopped serving during the run (engine dead or gone)."""
    interrupted: bool
    target: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "request_set_id": self.request_set_id,
                "options": asdict(self.options), "duration_s": round(self.duration_s, 3),
                "client": self.client.to_dict(), "server": self.server.to_dict(), "agents": asdict(self.agents),
                "peak_memory_bytes": self.peak_memory_bytes, "memory_source": self.memory_source,
                "failure": self.failure.to_dict() if self.failure else None, "died": self.died,
                "interrupted": self.interrupted, "target": self.target, "notes": list(self.notes)}


def _sessions(rs: RequestSet, count: int | None) -> list[list[Any]]:
    sessions = rs.sessions()
    return sessions if count is None else [sessions[i % len(sessions)] for i in range(count)]


async def run_load(target: Target, run: RunDir, rs: RequestSet, opts: BenchOptions, client: ClientOptions,
                   memory: str, progress: Progress, notes: tuple[str, ...] = ()) -> BenchResult:
    interrupted = False
    outcomes: list[SessionOutcome] = []
    sessions = _sessions(rs, opts.sessions)
    windows: list[Window] = []
    async with Load(target, run, client, memory) as load:
        deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
        progress.start("bench", None if deadline else sum(len(s) for s in sessions))
        try:
            async with load.window("bench") as windows:
                outcomes = await load.run_sessions(sessions, opts.concurrency, cycle=deadline is not None,
                                                   deadline=deadline, progress=progress, outcomes=outcomes)
        except asyncio.CancelledError:
            interrupted = True
        progress.finish()
        w = windows[0]
        failure = await asyncio.to_thread(classify, w.records, target, w.deltas)
        result = BenchResult(run.path, rs.id, opts, w.duration_s, summarise(w.records, w.duration_s, opts.slos or None),
                             w.deltas, AgentStats.of(outcomes), w.peak_memory_bytes, load.memory_note, failure,
                             load.dead is not None, interrupted, target.describe(), notes)
    write_json_atomic(run.file("bench.json", "the bench result (what --json prints)"), redact_obj(result.to_dict()))
    if interrupted:
        raise KeyboardInterrupt
    return result


def bench(spec: TargetSpec, workload: str, opts: BenchOptions, client: ClientOptions = ClientOptions(),
          progress: Progress = NoProgress()) -> BenchResult:
    opts.check()
    result: BenchResult | None = None
    try:
        with open_target(spec) as target:
            rs, note = request_set_for(workload, target)
            run, ours = run_folder(target, spec, "bench")
            rs.write(run.file("request-set.jsonl", REQUEST_SET_NOTE))
            run.update(bench={"workload": workload, "request_set_id": rs.id, **asdict(opts)}, target=target.describe())
            try:
                result = run_async(run_load(target, run, rs, opts, client, spec.memory, progress,
                                            (note,) if note else ()))
            except KeyboardInterrupt:
                if ours:
                    run.finish("interrupted")
                raise
            # In a launch's folder the launcher sets `state`; this says how the load itself ended.
            failure = result.failure.to_dict() if result.failure else None
            run.update(bench_outcome={"died": result.died, "failure": failure})
            if ours:
                run.finish("failed" if result.died else "complete")
    except RunFailed:
        # A server oomkit launched that died during the load fails its launch on the way out;
        # the load's own result already says so, with the finished requests.
        if result is None or not result.died:
            raise
    return result
