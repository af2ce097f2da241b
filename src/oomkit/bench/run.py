"""`bench`: target load (N concurrent agent sessions, for S sessions or D seconds), with the
client figures, the server's /metrics deltas, peak memory, agent-loop success and goodput."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field

from oomkit.bench.earlier import SESSIONS_FILE, Earlier, read_earlier
from oomkit.bench.pool import client_pool, record_clients
from oomkit.client.chat import ClientOptions
from oomkit.errors import InputError, RunFailed, UsageError
from oomkit.fsio import from_fields, json_object, write_json_atomic
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.engine import Load, SessionBatch, SessionOutcome, Window, run_async
from oomkit.loadrun.failure import classify, length_note
from oomkit.loadrun.prepare import TargetSpec, open_target, run_folder
from oomkit.loadrun.progress import NoProgress, Progress
from oomkit.loadrun.result import AgentStats, ResultHeader, header_from
from oomkit.loadrun.resume import LoadSpec, new_request_set, open_resume
from oomkit.loadrun.stats import ClientStats, ClientTally
from oomkit.metrics.deltas import MetricDeltas
from oomkit.rundir import redact_obj
from oomkit.serial import JsonObject
from oomkit.workload.requestset import RequestSet, SetRequest

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


# bench.json's keys in the order it has always written them.
BENCH_KEYS = (
    "run_dir",
    "request_set_id",
    "ran",
    "options",
    "duration_s",
    "client",
    "server",
    "agents",
    "peak_memory_bytes",
    "memory_source",
    "failure",
    "died",
    "interrupted",
    "target",
    "notes",
)


@dataclass(frozen=True, kw_only=True)
class BenchResult(ResultHeader):
    options: BenchOptions
    duration_s: float
    client: ClientStats
    server: MetricDeltas
    agents: AgentStats
    peak_memory_bytes: int | None
    died: bool
    """The server stopped serving during the run (engine dead or gone)."""

    def to_dict(self) -> JsonObject:
        body: JsonObject = {
            "options": asdict(self.options),
            "duration_s": round(self.duration_s, 3),
            "client": self.client.to_dict(),
            "server": self.server.to_dict(),
            "agents": asdict(self.agents),
            "peak_memory_bytes": self.peak_memory_bytes,
            "died": self.died,
        }
        return self.json_in_order(body, BENCH_KEYS)

    @classmethod
    def from_dict(cls, d: JsonObject, notes: tuple[str, ...] = ()) -> BenchResult:
        """bench.json as the result that wrote it."""
        duration_s, peak = d.get("duration_s"), d.get("peak_memory_bytes")
        return cls(
            **header_from(d, notes),
            options=from_fields(BenchOptions, json_object(d["options"])),
            duration_s=float(duration_s) if isinstance(duration_s, int | float) else 0.0,
            client=from_fields(ClientStats, json_object(d["client"])),
            server=from_fields(MetricDeltas, json_object(d["server"])),
            agents=from_fields(AgentStats, json_object(d["agents"])),
            peak_memory_bytes=peak if isinstance(peak, int) else None,
            died=bool(d.get("died")),
        )


def _sessions(rs: RequestSet, count: int | None) -> list[list[SetRequest]]:
    sessions = rs.sessions()
    return sessions if count is None else [sessions[i % len(sessions)] for i in range(count)]


async def run_load(ctx: LoadContext, opts: BenchOptions, earlier: Earlier = Earlier()) -> BenchResult:
    """Run the sessions (those `earlier` attempts finished are not run again); the result covers all."""
    target, run, rs, progress = ctx.target, ctx.run_dir, ctx.request_set, ctx.progress
    interrupted = False
    outcomes: list[SessionOutcome] = []
    sessions = _sessions(rs, opts.sessions)
    windows: list[Window] = []
    skip = earlier.finished
    ended = run.jsonl(SESSIONS_FILE, "one line per ended agent session (--resume skips the finished ones)")

    def on_outcome(outcome: SessionOutcome) -> None:
        outcomes.append(outcome)
        ended.append({**asdict(outcome), "attempt": ctx.attempt})

    # A bench may run for hours: its window keeps figures, not records (they are on disk).
    async with (
        client_pool(opts, target, ctx.client) as pool,
        Load(ctx, keep_records=False, pool=pool) as load,
    ):
        deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
        progress.start("bench", None if deadline else sum(len(s) for i, s in enumerate(sessions) if i not in skip))
        try:
            async with load.window("bench") as windows:
                batch = SessionBatch(sessions, opts.concurrency or 1, deadline=deadline, skip=skip)
                await load.run_sessions(batch, on_outcome)
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
        notes = ctx.notes + record_clients(run, pool)
        if too_long := length_note(stats.errors_by_kind.get("context_length", 0)):
            notes += (too_long,)
        result = BenchResult(
            run_dir=run.path,
            request_set_id=rs.id,
            options=opts,
            duration_s=duration_s,
            client=stats,
            server=deltas,
            agents=AgentStats.of([*earlier.outcomes, *outcomes]),
            peak_memory_bytes=peak,
            memory_source=load.memory_note,
            failure=failure,
            died=load.dead is not None,
            interrupted=interrupted,
            target=target.describe(),
            notes=notes,
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
                else new_request_set(run, target, LoadSpec("bench", spec, workload, asdict(opts)), ours=ours)
            )
            earlier = read_earlier(run) if job else Earlier()
            kept = f"kept {len(earlier.outcomes)} finished sessions" if job else ""
            notes = prepared + (job.notes(kept) if job else ())
            attempt = job.attempt if job else 0
            ctx = LoadContext(target, run, rs, client, spec.memory, progress, notes, attempt)
            try:
                result = run_async(run_load(ctx, opts, earlier))
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
