"""`ladder`: the research-bench steps against one server, recorded in the run folder, stopping at
the first failure; writes steps.jsonl, ladder.json and poc.json. A server that dies under a step
is no result of the ladder: the step is recorded with the failure and its evidence, the run ends
`failed` without a `ladder_outcome`, and `--resume` runs that step again on a new server."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import cast

from oomkit.client.chat import ClientOptions
from oomkit.errors import RunFailed
from oomkit.fsio import json_object, json_objects, write_json_atomic
from oomkit.ladder.poc import Poc, build_poc
from oomkit.ladder.result import ContextLimit, StepResult, server_died
from oomkit.ladder.resume import RUNGS_FILE, STEPS_FILE, Done, read_done, window_line
from oomkit.ladder.steps import STEPS, Ctx, LadderOptions
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.engine import Load, run_async
from oomkit.loadrun.knee import Knee
from oomkit.loadrun.prepare import TargetSpec, open_target, run_folder
from oomkit.loadrun.progress import NoProgress, Progress
from oomkit.loadrun.result import ResultHeader, header_from
from oomkit.loadrun.resume import LoadSpec, new_request_set, open_resume
from oomkit.loadrun.target import Target
from oomkit.rundir import RunDir, redact_obj
from oomkit.serial import JsonObject, to_jsonable

# ladder.json's keys in the order it has always written them.
LADDER_KEYS = (
    "run_dir",
    "request_set_id",
    "ran",
    "steps",
    "knee",
    "poc",
    "failure",
    "stopped_at",
    "server_died",
    "interrupted",
    "memory_source",
    "target",
    "notes",
)


@dataclass(frozen=True, kw_only=True)
class LadderResult(ResultHeader):
    steps: tuple[StepResult, ...]
    knee: Knee | None
    poc: Poc
    stopped_at: str | None
    """The step that failed (the ladder stops there); None when every step ran."""

    @property
    def server_died(self) -> bool:
        """The server died under the step it stopped at: the ladder did not end, --resume continues it."""
        return server_died(self.failure)

    def to_dict(self) -> JsonObject:
        body: JsonObject = {
            "steps": [s.to_dict() for s in self.steps],
            "knee": self.knee.to_dict()
            if self.knee
            else {"concurrency": None, "reason": "not reached", "last_good": None},
            "poc": to_jsonable(self.poc),
            "stopped_at": self.stopped_at,
            "server_died": self.server_died,
        }
        return self.json_in_order(body, LADDER_KEYS)

    @classmethod
    def from_dict(cls, d: JsonObject, notes: tuple[str, ...] = ()) -> LadderResult:
        """ladder.json as the result that wrote it (`ran` False: read back, not run)."""
        knee = json_object(d.get("knee"))
        stopped_at = d.get("stopped_at")
        return cls(
            **header_from(d, notes),
            steps=tuple(StepResult.from_dict(s) for s in json_objects(d["steps"])),
            knee=Knee.from_dict(knee) if knee and knee.get("reason") != "not reached" else None,
            poc=cast(Poc, dict(json_object(d.get("poc")))),  # as build_poc wrote it
            stopped_at=None if stopped_at is None else str(stopped_at),
        )


async def run_steps(ctx: LoadContext, opts: LadderOptions, done: Done = Done()) -> LadderResult:
    """Run the steps in order; steps (and concurrency rungs) in `done` are kept, not sent again."""
    run, attempt = ctx.run_dir, ctx.attempt
    steps: dict[str, StepResult] = {}
    stopped_at: str | None = None
    interrupted = False
    steps_file = run.jsonl(STEPS_FILE, "one line per ladder step: phase, memory, KV, preemptions, latency")
    rungs_file = run.jsonl(RUNGS_FILE, "one line per finished concurrency rung (--resume skips it)")
    async with Load(ctx) as load:
        state = Ctx(
            load,
            opts,
            dict(done.sent),
            ContextLimit(**done.context),
            done.knee,
            dict(done.rungs),
            lambda rung, window: rungs_file.append(redact_obj(window_line(rung, window, attempt))),
        )
        try:
            keeping = True  # the finished steps are a prefix of STEPS: keep them until the first one to run
            for name, step in STEPS:
                kept = done.steps.get(name) if keeping else None
                keeping = kept is not None
                result = kept or await step(state)
                steps[name] = result
                if kept is None:
                    steps_file.append({**redact_obj(result.to_dict()), "attempt": attempt})
                if result.failure is not None:
                    stopped_at = name
                    break
        except asyncio.CancelledError:
            interrupted = True
        finally:
            steps_file.close()
            rungs_file.close()
        failure = next((s.failure for s in steps.values() if s.failure), None)
        poc = build_poc(
            steps,
            state.knee,
            state.context,
            load.memory_note,
            opts.max_concurrency,
            stopped_at or ("interrupted" if interrupted else None),
        )
        ladder_result = LadderResult(
            run_dir=run.path,
            request_set_id=ctx.request_set.id,
            steps=tuple(steps.values()),
            knee=state.knee,
            poc=poc,
            failure=failure,
            stopped_at=stopped_at,
            interrupted=interrupted,
            memory_source=load.memory_note,
            target=ctx.target.describe(),
            notes=ctx.notes,
        )
    write_json_atomic(run.file("poc.json", "proof-of-concept criteria and what is still untested"), redact_obj(poc))
    write_json_atomic(
        run.file("ladder.json", "the whole ladder result (what --json prints)"), redact_obj(ladder_result.to_dict())
    )
    if interrupted:
        raise KeyboardInterrupt
    return ladder_result


def ladder(
    spec: TargetSpec,
    workload: str | None,
    opts: LadderOptions = LadderOptions(),
    client: ClientOptions = ClientOptions(),
    progress: Progress = NoProgress(),
    resume: str | None = None,
) -> LadderResult:
    """Resolve the target, materialise or reuse the request set, run the steps, record everything.
    With `resume` (a ladder's folder) the recorded target, request set and options are used
    again, the finished steps and rungs are kept, and the rest runs."""
    job = open_resume(resume, "ladder", spec, workload) if resume else None
    if job is not None:
        spec, opts = job.spec, job.options(LadderOptions, opts, job.section.get("options") or {})
        if job.finished:
            return LadderResult.from_dict(job.saved(), job.finished_note())
    result: LadderResult | None = None
    try:
        with job.holding() if job else contextlib.nullcontext(), open_target(spec) as target:
            run, ours = (job.attach(target), True) if job else run_folder(target, spec, "ladder")
            rs, prepared = (
                (job.request_set(), ())
                if job
                else new_request_set(
                    run, target, LoadSpec("ladder", spec, workload, {"options": opts.__dict__}), ours=ours
                )
            )
            done = read_done(run, rs) if job else Done()
            notes = prepared + (job.notes(done.kept()) if job else ())
            attempt = job.attempt if job else 0
            ctx = LoadContext(target, run, rs, client, spec.memory, progress, notes, attempt)
            try:
                result = run_async(run_steps(ctx, opts, done))
            except KeyboardInterrupt:
                if ours:
                    run.finish("interrupted")
                raise
            _record_end(run, result, target, ours, resumed=job is not None)
    except RunFailed:
        # A launched server that died during a step fails its launch on the way out; the ladder's
        # result already records and classifies that failure.
        if result is None or result.failure is None:
            raise
    return result


def _record_end(run: RunDir, result: LadderResult, target: Target, ours: bool, resumed: bool) -> None:
    """How the ladder ended, in its manifest. In a launch's folder the launcher sets `state`
    (`died_after_ready` when the server died); `ladder_outcome` says how the ladder itself ended,
    and a ladder whose server died has none: it did not end, `--resume` continues it."""
    if result.server_died:
        run.update(server_death=death_entry(result, target))
        if ours:
            run.finish("failed", reason="server_died", stopped_at=result.stopped_at, error=death_text(result))
        return
    run.update(
        ladder_outcome={
            "stopped_at": result.stopped_at,
            "knee": result.poc.get("knee"),
            "failure": result.failure.to_dict() if result.failure else None,
        }
    )
    if ours:  # a resume clears what the attempt before it left (e.g. the launcher's died_after_ready)
        cleared = {"reason": None, "error": None, "server_death": None} if resumed else {}
        run.finish("failed" if result.failure else "complete", stopped_at=result.stopped_at, **cleared)


def death_entry(result: LadderResult, target: Target) -> JsonObject:
    """The manifest's `server_death`: the step the server died under, and why (as compare's)."""
    why = result.failure
    assert why is not None
    return {
        "step": result.stopped_at,
        "server_run": str(target.run_dir.path) if target.run_dir else None,
        "kind": why.kind,
        "phase": why.phase,
        "reason": why.reason,
        "evidence": to_jsonable(why.evidence[:3]),
    }


def death_text(result: LadderResult) -> str:
    why = result.failure
    assert why is not None
    return f"the server died during step {result.stopped_at}: {why.phase}: {why.reason}"
