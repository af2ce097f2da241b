"""`bench`: target load (N concurrent agent sessions, for S sessions or D seconds), with the
client figures, the server's /metrics deltas, peak memory, agent-loop success and goodput."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from oomkit.bench.engine import Load, SessionOutcome, Window, run_async
from oomkit.bench.failure import Failure, classify, length_note
from oomkit.bench.pool import client_pool, record_clients
from oomkit.bench.prepare import TargetSpec, open_target, run_folder
from oomkit.bench.progress import NoProgress, Progress
from oomkit.bench.resume import SESSIONS_FILE, Earlier, new_request_set, open_resume, read_earlier
from oomkit.bench.stats import ClientStats, ClientTally
from oomkit.bench.target import Target
from oomkit.client.chat import ClientOptions
from oomkit.errors import InputError, RunFailed, UsageError
from oomkit.fsio import write_json_atomic
from oomkit.metrics.deltas import MetricDeltas
from oomkit.rundir import RunDir, redact_obj
from oomkit.workload.requestset import RequestSet

MAX_CLIENTS = 1024


@dataclass(frozen=True)
class BenchOptions:
    concurrency: int | None = None
    """Agent sessions running at once (required; a resumed bench takes the recorded one)."""
    sessions: int | None = None
    """Sessions to run (the set's sessions in order, repeated if more); default: each once."""
    duration_s: float | None = None
    """Run for this long instead, repeating the sessions; requests started before the end finish."""
    slos: dict[str, float] = field(default_factory=dict)
    clients: int = 1
    """Client processes (or Ray actors with `ray`) that stream the requests; 1: this process."""
    ray: str | None = None
    """A Ray cluster for the clients: an address, "" for RAY_ADDRESS or a new local instance; None: no Ray."""

    def check(self) -> None:
        if self.concurrency is None:
            raise UsageError("--concurrency N is required")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.sessions is not None and self.duration_s is not None:
            raise UsageError("give --sessions or --duration, not both")
        if (self.sessions is not None and self.sessions < 1) or (self.duration_s is not None and self.duration_s <= 0):
            raise UsageError("--sessions and --duration must be positive")
        if self.clients < 1 or self.clients > MAX_CLIENTS:
            raise UsageError(f"--clients must be between 1 and {MAX_CLIENTS}")
        if self.ray is not None and self.clients < 2:
            raise UsageError("--ray runs the clients as Ray actors: give --clients N (2 or more) with it")


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
    def of(cls, outcomes: list[SessionOutcome]) -> AgentStats:
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
    ran: bool = True
    """False when --resume found the bench already finished: nothing was sent, this is its record."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "request_set_id": self.request_set_id,
            "ran": self.ran,
            "options": asdict(self.options),
            "duration_s": round(self.duration_s, 3),
            "client": self.client.to_dict(),
            "server": self.server.to_dict(),
            "agents": asdict(self.agents),
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_source": self.memory_source,
            "failure": self.failure.to_dict() if self.failure else None,
            "died": self.died,
            "interrupted": self.interrupted,
            "target": self.target,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], notes: tuple[str, ...] = ()) -> BenchResult:
        """bench.json as the result that wrote it."""
        server = {k: v for k, v in d["server"].items() if k in {f.name for f in fields(MetricDeltas)}}
        failure = d.get("failure")
        return cls(
            Path(d["run_dir"]),
            d.get("request_set_id", ""),
            BenchOptions(**d["options"]),
            float(d.get("duration_s") or 0.0),
            ClientStats(**d["client"]),
            MetricDeltas(**server),
            AgentStats(**d["agents"]),
            d.get("peak_memory_bytes"),
            str(d.get("memory_source") or ""),
            Failure(**failure) if isinstance(failure, dict) else None,
            bool(d.get("died")),
            bool(d.get("interrupted")),
            dict(d.get("target") or {}),
            tuple(d.get("notes") or ()) + notes,
            ran=False,
        )


def _sessions(rs: RequestSet, count: int | None) -> list[list[Any]]:
    sessions = rs.sessions()
    return sessions if count is None else [sessions[i % len(sessions)] for i in range(count)]


async def run_load(
    target: Target,
    run: RunDir,
    rs: RequestSet,
    opts: BenchOptions,
    client: ClientOptions,
    memory: str,
    progress: Progress,
    notes: tuple[str, ...] = (),
    *,
    earlier: Earlier = Earlier(),
    attempt: int = 0,
) -> BenchResult:
    """Run the sessions (those `earlier` attempts finished are not run again); the result covers all."""
    interrupted = False
    outcomes: list[SessionOutcome] = []
    sessions = _sessions(rs, opts.sessions)
    windows: list[Window] = []
    skip = earlier.finished
    ended = run.jsonl(SESSIONS_FILE, "one line per ended agent session (--resume skips the finished ones)")
    # A bench may run for hours: its window keeps figures, not records (they are on disk).
    async with (
        client_pool(opts, target, client) as pool,
        Load(target, run, client, memory, attempt=attempt, keep_records=False, pool=pool) as load,
    ):
        deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
        progress.start("bench", None if deadline else sum(len(s) for i, s in enumerate(sessions) if i not in skip))
        try:
            async with load.window("bench") as windows:
                outcomes = await load.run_sessions(
                    sessions,
                    opts.concurrency or 1,
                    cycle=deadline is not None,
                    deadline=deadline,
                    progress=progress,
                    outcomes=outcomes,
                    skip=skip,
                    on_outcome=lambda o: ended.append({**asdict(o), "attempt": attempt}),
                )
        except asyncio.CancelledError:
            interrupted = True
        finally:
            ended.close()
        progress.finish()
        w = windows[0]
        failure = await asyncio.to_thread(classify, w.client.failed, target, w.deltas)
        scrapes = [s for s in load.scraper.since(0) if s.label == "bench"]
        _, deltas, peak, duration_s = earlier.totals(w, scrapes)
        stats = ClientTally(earlier.records).merge(w.client).stats(duration_s, opts.slos or None)
        notes += record_clients(run, pool)
        if too_long := length_note(stats.errors_by_kind.get("context_length", 0)):
            notes += (too_long,)
        result = BenchResult(
            run.path,
            rs.id,
            opts,
            duration_s,
            stats,
            deltas,
            AgentStats.of([*earlier.outcomes, *outcomes]),
            peak,
            load.memory_note,
            failure,
            load.dead is not None,
            interrupted,
            target.describe(),
            notes,
        )
    write_json_atomic(run.file("bench.json", "the bench result (what --json prints)"), redact_obj(result.to_dict()))
    if interrupted:
        raise KeyboardInterrupt
    return result


def bench(
    spec: TargetSpec,
    workload: str | None,
    opts: BenchOptions,
    client: ClientOptions = ClientOptions(),
    progress: Progress = NoProgress(),
    resume: str | None = None,
) -> BenchResult:
    """Run the bench and record it. With `resume` (a bench's folder) the recorded target, request
    set and options are used again; the sessions already recorded are not re-run."""
    job = open_resume(resume, "bench", spec, workload) if resume else None
    if job is not None:
        spec, opts = job.spec, job.options(BenchOptions, opts, job.section)
        if job.finished:
            return BenchResult.from_dict(job.saved(), job.finished_note())
        if opts.duration_s is not None:
            raise InputError(
                f"{job.run.path}: a --duration bench cannot be resumed (its sessions repeat until the clock runs out)",
                hint="start a new bench",
            )
    elif workload is None:
        raise UsageError("--workload is required (a workload YAML or a request-set.jsonl)")
    opts.check()
    result: BenchResult | None = None
    try:
        with job.holding() if job else contextlib.nullcontext(), open_target(spec) as target:
            run, ours = (job.attach(target), True) if job else run_folder(target, spec, "bench")
            rs, prepared = (
                (job.request_set(), ())
                if job
                else new_request_set(run, "bench", spec, workload, target, asdict(opts), ours=ours)
            )
            earlier = read_earlier(run) if job else Earlier()
            kept = f"kept {len(earlier.outcomes)} finished sessions" if job else ""
            notes = prepared + (job.notes(kept) if job else ())
            try:
                result = run_async(
                    run_load(
                        target,
                        run,
                        rs,
                        opts,
                        client,
                        spec.memory,
                        progress,
                        notes,
                        earlier=earlier,
                        attempt=job.attempt if job else 0,
                    )
                )
            except KeyboardInterrupt:
                if ours:
                    run.finish("interrupted")
                raise
            # In a launch's folder the launcher sets `state`; this says how the load itself ended.
            failure = result.failure.to_dict() if result.failure else None
            run.update(bench_outcome={"died": result.died, "failure": failure})
            if ours:
                run.finish("failed" if result.died else "complete", **({"reason": None} if job else {}))
    except RunFailed:
        # A server oomkit launched that died during the load fails its launch on the way out;
        # the load's own result already says so, with the finished requests.
        if result is None or not result.died:
            raise
    return result
