"""`oomkit investigate PROFILE --requirements R.yaml`: env -> launch -> ladder -> the cache-vs-context
comparisons -> decide -> report, in one command. The ladder and the comparison's baseline share one
server; only server-side modes restart vLLM. Every stage is recorded in an investigation folder,
so `--resume` continues where a stopped run left off."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oomkit.client.chat import ClientOptions
from oomkit.compare import CompareOptions, cache_vs_context, compare
from oomkit.compare.preset import PresetOptions
from oomkit.decide import DecideOptions, decide, load_requirements
from oomkit.decide.model import DecisionDoc
from oomkit.decide.requirements import Requirements
from oomkit.errors import InputError
from oomkit.fsio import json_object, write_json_atomic
from oomkit.ladder import LadderOptions
from oomkit.ladder.run import run_steps
from oomkit.launch import LaunchFailed, load_profile
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.folder import FolderSpec, resume_or_create
from oomkit.loadrun.prepare import fit_to_target, request_set_for
from oomkit.loadrun.progress import NoProgress, Progress
from oomkit.loadrun.target import Target, profile_target
from oomkit.report import render
from oomkit.rundir import RunDir, redact_obj
from oomkit.serial import Json, JsonObject, to_json_object

STAGES = ("env", "ladder", "compare", "decision", "report")
# Steps before the concurrency rungs: a ladder that stops there has no capacity to compare.
EARLY_STEPS = ("short_request", "tool_call", "agent_steps", "history_doubling")


@dataclass(frozen=True)
class InvestigateOptions:
    workload: str | None = None
    """Workload YAML or request set; default: the requirements' `workload:`, else the built-in agent."""
    team: str = "production"
    repeats: int = 2
    runs_dir: str = "runs"
    resume: str | None = None
    recipe: str | None = None
    memory: str = "auto"
    client: ClientOptions = field(default_factory=ClientOptions)
    on_event: Callable[[str], None] | None = None
    progress: Progress = field(default_factory=NoProgress)


@dataclass(frozen=True)
class InvestigateResult:
    run_dir: Path
    verdict: str
    rule: str
    summary: str
    checklist: dict[str, str]
    report_html: str
    run_dirs: dict[str, str | None]
    timings_s: dict[str, float]
    server_starts: int
    restarts: int
    decision: DecisionDoc

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


class _State:
    """The investigation folder's manifest: which stages are done and where their folders are.
    `stages` is read back from an earlier attempt's manifest: JSON, narrowed where it is read."""

    def __init__(self, run: RunDir):
        self.run = run
        m = run.manifest()
        self.stages: JsonObject = dict(json_object(m.get("stages")))
        self.timings: dict[str, float] = {
            k: float(v) for k, v in json_object(m.get("timings_s")).items() if isinstance(v, int | float)
        }
        starts = m.get("server_starts")
        self.starts = starts if isinstance(starts, int) else 0

    def stage(self, name: str) -> JsonObject:
        """A stage recorded as an object (ladder, compare); {} when it is not (yet) recorded."""
        return json_object(self.stages.get(name))

    def done(self, stage: str, value: Json, began: float) -> None:
        self.stages[stage] = value
        self.timings[stage] = round(self.timings.get(stage, 0.0) + time.monotonic() - began, 2)
        self.save()

    def save(self) -> None:
        self.run.update(stages=self.stages, timings_s=self.timings, server_starts=self.starts)


def _text(value: Json | None) -> str | None:
    return None if value is None else str(value)


def _count(value: Json | None) -> int:
    return value if isinstance(value, int) else 0


def _say(opts: InvestigateOptions, text: str) -> None:
    if opts.on_event:
        opts.on_event(text)


def _folder(profile: str, req: Requirements, opts: InvestigateOptions) -> RunDir:
    record: JsonObject = {
        "investigation": {
            "profile": str(Path(profile).resolve()),
            "requirements": req.source,
            "team": opts.team,
            "repeats": opts.repeats,
            "workload": opts.workload,
        }
    }
    folder = FolderSpec("investigation", f"investigate-{req.name}", record)
    return resume_or_create(opts.resume, opts.runs_dir, folder, lambda run: _same_profile(run, profile))


def _same_profile(run: RunDir, profile: str) -> None:
    inv = json_object(run.manifest().get("investigation"))
    if run.manifest().get("kind") != "investigation":
        raise InputError(f"{run.path}: not an investigation folder")
    if inv.get("profile") != str(Path(profile).resolve()):
        raise InputError(
            f"{run.path} investigated {inv.get('profile')}, not {profile}",
            hint="resume with the same profile, or start a new investigation",
        )


def _env(state: _State, opts: InvestigateOptions) -> None:
    if "env" in state.stages:
        return
    began = time.monotonic()
    from oomkit.env import take_snapshot

    snap = take_snapshot()
    path = state.run.file("env.json", "the environment snapshot taken before the launch")
    write_json_atomic(path, redact_obj(snap.to_dict()))
    software = snap.software
    distribution, version = (software.vllm_distribution, software.vllm_version) if software else (None, None)
    _say(opts, f"env: {distribution} {version}, {len(snap.gpus)} GPU(s)")
    state.done("env", str(path), began)


def ladder_options(req: Requirements) -> LadderOptions:
    """No need to search above the target with its reserve: that is the question."""
    return LadderOptions(
        max_concurrency=max(2, math.ceil(req.target_with_reserve())),
        max_prompt_tokens=None,
        slos={"ttft_ms": req.slo.ttft_p95_ms, "latency_ms": req.slo.e2e_p95_ms},
    )


def _ladder(target: Target, state: _State, workload: str | None, req: Requirements, opts: InvestigateOptions) -> None:
    began = time.monotonic()
    run = target.run_dir
    assert run is not None
    rs, note = request_set_for(workload, target)
    rs, fit_note = fit_to_target(run, rs, target)
    rs.write(run.file("request-set.jsonl", "the requests sent (reuse it with --workload for an identical rerun)"))
    lopts = ladder_options(req)
    run.update(
        ladder={"workload": workload, "request_set_id": rs.id, "options": lopts.__dict__}, target=target.describe()
    )
    _say(opts, f"ladder on {target.base_url} (up to {lopts.max_concurrency} concurrent dialogs)")
    if fit_note:
        _say(opts, fit_note)
    notes = tuple(n for n in (note, fit_note) if n)
    ctx = LoadContext(target, run, rs, opts.client, opts.memory, opts.progress, notes)
    result = asyncio.run(run_steps(ctx, lopts))
    state.done(
        "ladder",
        {
            "run_dir": str(run.path),
            "stopped_at": result.stopped_at,
            "knee": result.knee.to_dict() if result.knee else None,
        },
        began,
    )


def _compare(state: _State, profile: str, req: Requirements, target: Target | None, opts: InvestigateOptions) -> None:
    ladder = state.stage("ladder")
    if ladder.get("stopped_at") in EARLY_STEPS:
        state.done("compare", {"skipped": f"the ladder stopped at {ladder['stopped_at']}"}, time.monotonic())
        return
    began = time.monotonic()
    request_set = str(Path(str(ladder["run_dir"])) / "request-set.jsonl")
    popts = PresetOptions(repeats=opts.repeats, steps=req.agent_steps_per_dialog)
    preset = cache_vs_context(profile, request_set, req.concurrent_dialogs, popts)
    previous = _text(state.stages.get("compare_folder") or None)

    def remember(folder: RunDir) -> None:
        state.stages["compare_folder"] = str(folder.path)
        state.save()

    copts = CompareOptions(
        runs_dir=opts.runs_dir,
        resume=previous,
        memory=opts.memory,
        client=opts.client,
        on_event=opts.on_event,
        target=target,
        on_folder=remember,
    )
    result = compare(preset.spec, copts, notes=preset.notes)
    state.done(
        "compare",
        {
            "run_dir": str(result.run_dir),
            "restarts": result.data["restarts"],
            "server_starts": result.data["server_starts"],
        },
        began,
    )


def _measure(profile: str, req: Requirements, state: _State, opts: InvestigateOptions) -> None:
    workload = opts.workload or req.workload_path()
    if "ladder" not in state.stages:
        began = time.monotonic()
        state.starts += 1
        state.save()
        try:
            with profile_target(profile, opts.runs_dir) as target:
                state.timings["launch"] = round(time.monotonic() - began, 2)
                _ladder(target, state, workload, req, opts)
                if "compare" not in state.stages:
                    _compare(state, profile, req, target if target.alive and target.alive() else None, opts)
        except LaunchFailed as err:
            _say(opts, f"launch failed: {err.one_line()}")
            state.done(
                "ladder", {"run_dir": str(err.result.run_dir), "launch_failed": True, "stopped_at": "launch"}, began
            )
            state.done("compare", {"skipped": "the server did not start"}, time.monotonic())
    if "compare" not in state.stages:
        _compare(state, profile, req, None, opts)


def _evidence_runs(state: _State) -> list[str]:
    runs = [str(state.stage("ladder")["run_dir"])]
    comp = state.stage("compare")
    if comp.get("run_dir"):
        runs.append(str(comp["run_dir"]))
    return runs


def investigate(profile: str, requirements: str, opts: InvestigateOptions = InvestigateOptions()) -> InvestigateResult:
    load_profile(profile)  # fail on a bad profile before any stage runs
    req = load_requirements(requirements)
    state = _State(_folder(profile, req, opts))
    _say(opts, f"investigation folder {state.run.path}")
    try:
        _env(state, opts)
        _measure(profile, req, state, opts)
    except KeyboardInterrupt:
        state.run.finish("interrupted")
        raise
    except Exception as err:  # the stages done so far stay recorded: --resume continues from them
        state.run.finish("failed", error=f"{type(err).__name__}: {err}")
        raise
    began = time.monotonic()
    decision = decide(_evidence_runs(state), req, DecideOptions(opts.team, opts.runs_dir, opts.recipe))
    state.done("decision", str(decision.run_dir), began)
    began = time.monotonic()
    html = render(str(decision.run_dir), "html", runs_dir=opts.runs_dir)
    state.done("report", str(html), began)
    comp = state.stage("compare")
    restarts, starts = _count(comp.get("restarts")), state.starts + _count(comp.get("server_starts"))
    run_dirs: dict[str, str | None] = {
        "investigation": str(state.run.path),
        "ladder": _text(state.stage("ladder")["run_dir"]),
        "compare": _text(comp.get("run_dir")),
        "decision": str(decision.run_dir),
    }
    result = InvestigateResult(
        state.run.path,
        decision.verdict,
        decision.rule["id"],
        decision.summary,
        {i.key: i.status for i in decision.checklist},
        str(html),
        run_dirs,
        state.timings,
        starts,
        restarts,
        decision.to_dict(),
    )
    state.run.finish("complete", result={k: v for k, v in result.to_dict().items() if k != "decision"})
    return result
