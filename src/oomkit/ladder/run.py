"""`ladder`: the research-bench steps against one server, recorded in the run folder, stopping at
the first failure; writes steps.jsonl, ladder.json and poc.json."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomkit.bench.engine import Load, run_async
from oomkit.bench.failure import Failure
from oomkit.bench.prepare import REQUEST_SET_NOTE, TargetSpec, open_target, request_set_for, run_folder
from oomkit.bench.progress import NoProgress, Progress
from oomkit.bench.target import Target
from oomkit.client.chat import ClientOptions
from oomkit.errors import RunFailed
from oomkit.fsio import write_json_atomic
from oomkit.ladder.knee import Knee
from oomkit.ladder.poc import build_poc
from oomkit.ladder.result import StepResult
from oomkit.ladder.steps import STEPS, Ctx, LadderOptions
from oomkit.rundir import RunDir, redact_obj
from oomkit.workload.requestset import RequestSet


@dataclass(frozen=True)
class LadderResult:
    run_dir: Path
    request_set_id: str
    steps: tuple[StepResult, ...]
    knee: Knee | None
    poc: dict[str, Any]
    failure: Failure | None
    stopped_at: str | None
    """The step that failed (the ladder stops there); None when every step ran."""
    interrupted: bool
    memory_source: str
    target: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "request_set_id": self.request_set_id,
                "steps": [s.to_dict() for s in self.steps],
                "knee": self.knee.to_dict() if self.knee else {"concurrency": None, "reason": "not reached",
                                                                 "last_good": None},
                "poc": self.poc, "failure": self.failure.to_dict() if self.failure else None,
                "stopped_at": self.stopped_at, "interrupted": self.interrupted,
                "memory_source": self.memory_source, "target": self.target, "notes": list(self.notes)}


async def run_steps(target: Target, run: RunDir, rs: RequestSet, opts: LadderOptions, client: ClientOptions,
                    memory: str, progress: Progress, notes: tuple[str, ...] = ()) -> LadderResult:
    steps: dict[str, StepResult] = {}
    stopped_at: str | None = None
    interrupted = False
    steps_file = run.jsonl("steps.jsonl", "one line per ladder step: phase, memory, KV, preemptions, latency")
    async with Load(target, run, client, memory) as load:
        ctx = Ctx(load, target, rs, opts, progress)
        try:
            for name, step in STEPS:
                result = await step(ctx)
                steps[name] = result
                steps_file.append(redact_obj(result.to_dict()))
                if result.failure is not None:
                    stopped_at = name
                    break
        except asyncio.CancelledError:
            interrupted = True
        finally:
            steps_file.close()
        failure = next((s.failure for s in steps.values() if s.failure), None)
        poc = build_poc(steps, ctx.knee, ctx.context, load.memory_note, opts.max_concurrency,
                        stopped_at or ("interrupted" if interrupted else None))
        result = LadderResult(run.path, rs.id, tuple(steps.values()), ctx.knee, poc, failure, stopped_at,
                              interrupted, load.memory_note, target.describe(), notes)
    write_json_atomic(run.file("poc.json", "proof-of-concept criteria and what is still untested"), redact_obj(poc))
    write_json_atomic(run.file("ladder.json", "the whole ladder result (what --json prints)"),
                      redact_obj(result.to_dict()))
    if interrupted:
        raise KeyboardInterrupt
    return result


def ladder(spec: TargetSpec, workload: str | None, opts: LadderOptions = LadderOptions(),
           client: ClientOptions = ClientOptions(), progress: Progress = NoProgress()) -> LadderResult:
    """Resolve the target, materialise or reuse the request set, run the steps, record everything."""
    result: LadderResult | None = None
    try:
        with open_target(spec) as target:
            rs, note = request_set_for(workload, target)
            run, ours = run_folder(target, spec, "ladder")
            rs.write(run.file("request-set.jsonl", REQUEST_SET_NOTE))
            run.update(ladder={"workload": workload, "request_set_id": rs.id, "options": opts.__dict__},
                       target=target.describe())
            try:
                result = run_async(run_steps(target, run, rs, opts, client, spec.memory, progress,
                                             (note,) if note else ()))
            except KeyboardInterrupt:
                if ours:
                    run.finish("interrupted")
                raise
            # In a launch's folder the launcher sets `state`; this says how the ladder itself ended.
            run.update(ladder_outcome={"stopped_at": result.stopped_at, "knee": result.poc.get("knee"),
                                       "failure": result.failure.to_dict() if result.failure else None})
            if ours:
                run.finish("failed" if result.failure else "complete", stopped_at=result.stopped_at)
    except RunFailed:
        # A launched server that died during a step fails its launch on the way out; the ladder's
        # result already records and classifies that failure.
        if result is None or result.failure is None:
            raise
    return result
