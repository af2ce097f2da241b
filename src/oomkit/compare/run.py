"""`compare(experiment)`: the baseline server runs the baseline and every client-side mode; each
server-side mode gets its own server through `launch`. Cells go to a compare folder (kind
`compare`): cells.jsonl as they finish, compare.json with the verdicts at the end. Resumable.
A server that dies during a cell: that cell is recorded with the failure and its evidence; a dead
baseline server ends the comparison (failed, exit 1, resume continues), a dead variant server is
that variant's result, like a variant that does not start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from oomkit.client.chat import ClientOptions
from oomkit.compare.cells import Cell, GroupJob, run_group
from oomkit.compare.checks import check_plan, variant_profile
from oomkit.compare.document import (
    CellDoc,
    CompareDoc,
    CompareJson,
    LaunchFailureDoc,
    ServerDeathDoc,
    Totals,
    as_cells,
    as_record,
)
from oomkit.compare.spec import BASELINE, ExperimentSpec, Mode, Plan, load_experiment, plan_experiment
from oomkit.compare.verdict import compare_modes
from oomkit.errors import InputError, RunFailed, UsageError
from oomkit.fsio import json_list, write_json_atomic
from oomkit.launch import LaunchFailed, Profile, load_profile
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.folder import FolderSpec, resume_or_create
from oomkit.loadrun.prepare import request_set_for
from oomkit.loadrun.target import Target, profile_target, url_target
from oomkit.rundir import RunDir, redact_obj
from oomkit.serial import JsonObject, to_json_object
from oomkit.units import fmt_count, fmt_ms, fmt_pct
from oomkit.workload.requestset import RequestSet, read_request_set

SCHEMA = "oomkit.compare/1"
REQUEST_SET = "request-set.jsonl"


class ServerDied(RunFailed):
    """The baseline server died during a cell: there is nothing left to compare against."""


@dataclass(frozen=True)
class CompareOptions:
    runs_dir: str = "runs"
    url: str | None = None
    """Run against this server instead of launching the profile (client-side modes only)."""
    resume: str | None = None
    """A compare folder (path or id) to continue: finished cells are kept, the rest run."""
    repeats: int | None = None
    memory: str = "auto"
    client: ClientOptions = field(default_factory=ClientOptions)
    on_event: Callable[[str], None] | None = None
    target: Target | None = None
    """A server already running from the experiment's profile: the baseline group runs on it."""
    on_folder: Callable[[RunDir], None] | None = None
    """Called with the compare folder as soon as it exists (so a caller can resume it)."""


@dataclass(frozen=True)
class CompareResult:
    run_dir: Path
    data: CompareDoc
    """What compare.json holds."""

    @property
    def cells(self) -> list[CellDoc]:
        return list(self.data["cells"])

    def to_dict(self) -> CompareJson:
        return {"run_dir": str(self.run_dir), **self.data}


def _say(opts: CompareOptions, text: str) -> None:
    if opts.on_event:
        opts.on_event(text)


def _folder(spec: ExperimentSpec, plan: Plan, opts: CompareOptions) -> RunDir:
    record: JsonObject = {
        "experiment": spec.model_dump(mode="json"),
        "experiment_file": spec.source,
        "modes": [to_json_object(m) for m in plan.modes],
        "notes": list(plan.notes),
    }
    reopened: JsonObject = {"state": "running", "reason": None, "error": None, "ended_at": None}
    folder = FolderSpec("compare", spec.name, record, reopened)
    return resume_or_create(opts.resume, opts.runs_dir, folder, lambda run: _same_experiment(run, spec))


def _same_experiment(run: RunDir, spec: ExperimentSpec) -> None:
    record = as_record(run.manifest())
    if record.get("kind") != "compare":
        raise InputError(f"{run.path}: not a compare folder (kind {record.get('kind')!r})")
    name = record.get("experiment", {}).get("name")
    if name != spec.name:
        raise InputError(
            f"{run.path} belongs to experiment {name!r}, not {spec.name!r}", hint="resume with the same experiment file"
        )


def _request_set(run: RunDir, spec: ExperimentSpec, target: Target) -> RequestSet:
    path = run.path / REQUEST_SET
    if path.is_file():
        return read_request_set(path)
    rs, note = request_set_for(spec.path(spec.workload), target)
    rs.write(run.file(REQUEST_SET, "the request set every cell sends (one materialisation for all servers)"))
    run.update(request_set_id=rs.id, request_set_note=note)
    return rs


def _groups(plan: Plan) -> list[tuple[Mode | None, tuple[Mode, ...]]]:
    return [(None, plan.same_server_modes())] + [(m, (m,)) for m in plan.server_modes()]


def _pending(modes: tuple[Mode, ...], repeats: int, done: set[tuple[str, int]]) -> bool:
    return any((m.name, r) not in done for m in modes for r in range(1, repeats + 1))


class _Runner:
    """Walks the server groups of one experiment, keeping what each launch did."""

    def __init__(self, run: RunDir, spec: ExperimentSpec, profile: Profile, repeats: int, opts: CompareOptions):
        self.run, self.spec, self.profile, self.repeats, self.opts = run, spec, profile, repeats, opts
        record = as_record(run.manifest())
        cells = as_cells(run.read_jsonl("cells.jsonl"))
        self.done = {(c["mode"], c["repeat"]) for c in cells if not c.get("failure")}
        self.launches = self.restarts = 0
        self.before = record.get("compare") or Totals(server_starts=0, restarts=0)
        self.failures: dict[str, LaunchFailureDoc] = dict(record.get("launch_failures") or {})
        self.deaths: dict[str, ServerDeathDoc] = dict(record.get("server_deaths") or {})
        self.servers: dict[str, str | None] = dict(record.get("server_runs") or {})

    def totals(self) -> Totals:
        """Server starts and restarts over every attempt at this comparison (resumes included)."""
        return {
            "server_starts": int(self.before.get("server_starts") or 0) + self.launches,
            "restarts": int(self.before.get("restarts") or 0) + self.restarts,
        }

    def cells(self, target: Target, name: str, modes: tuple[Mode, ...]) -> Cell | None:
        """Run the group's pending cells; the cell during which the server died, if it did."""
        self.servers[name] = str(target.run_dir.path) if target.run_dir else None
        self.run.update(server_runs=self.servers)
        cells = self._run_server(target, target.run_dir or self.run, modes)
        return next((c for c in cells if c.failure), None)

    def _run_server(self, target: Target, server_run: RunDir, modes: tuple[Mode, ...]) -> list[Cell]:
        """The group's cells on one server, appended to cells.jsonl as each finishes."""
        spec, opts, done = self.spec, self.opts, self.done
        rs = _request_set(self.run, spec, target)
        job = GroupJob(
            modes,
            self.repeats,
            spec.concurrency,
            spec.sessions,
            spec.steps,
            spec.reset,
            self.run.run_id[-4:],
            frozenset(done),
        )
        with self.run.jsonl("cells.jsonl", "one line per finished cell: mode, repeat, figures") as out:

            def on_cell(cell: Cell) -> None:
                out.append(redact_obj(cell.to_dict()))
                if cell.failure:
                    why = cell.failure
                    _say(opts, f"cell {cell.label}: the server died: {why.get('kind')}: {why.get('reason')}")
                    return
                done.add((cell.mode, cell.repeat))
                _say(
                    opts,
                    f"cell {cell.label}: {cell.requests} requests, {cell.errors} errors, "
                    f"TTFT p95 {fmt_ms(cell.ttft_ms_p95)}, preemptions {fmt_count(cell.preemptions)}, "
                    f"hit rate {fmt_pct(cell.prefix_cache_hit_rate)}",
                )

            ctx = LoadContext(target, server_run, rs, opts.client, opts.memory)
            return asyncio.run(run_group(ctx, job, on_cell))

    def group(self, server_mode: Mode | None, modes: tuple[Mode, ...]) -> None:
        if not modes or not _pending(modes, self.repeats, self.done):
            return
        name = server_mode.name if server_mode else BASELINE
        self.failures.pop(name, None)  # an earlier attempt's outcome; this attempt records its own
        self.deaths.pop(name, None)
        self.run.update(launch_failures=self.failures, server_deaths=self.deaths)
        if self.opts.url:
            return self._died(name, server_mode, self.cells(url_target(self.opts.url), name, modes))
        if server_mode is None and self.opts.target is not None:
            return self._died(name, server_mode, self.cells(self.opts.target, name, modes))
        prof = variant_profile(self.profile, server_mode) if server_mode else self.profile
        _say(self.opts, f"launching the {name} server ({prof.label})")
        self.launches += 1
        self.restarts += server_mode is not None  # only server-side modes restart vLLM
        died: Cell | None = None
        try:
            # profile_target hands `prof` to launched(), which takes a Profile too; loadrun.target annotates it str.
            with profile_target(prof, self.opts.runs_dir) as target:  # type: ignore[arg-type]
                died = self.cells(target, name, modes)
        except LaunchFailed as err:  # not ready; or it died during the cells, which `died` explains
            if died is None and server_mode is None:
                raise
            if died is None:
                # A variant that does not start is a result (e.g. a max_model_len the pool cannot hold).
                self.failures[name] = {
                    "run_dir": str(err.result.run_dir),
                    "phase": err.verdict.get("phase"),
                    "summary": err.verdict.get("summary"),
                    "evidence": json_list(err.verdict.get("evidence"))[:3],
                }
                self.run.update(launch_failures=self.failures)
                _say(self.opts, f"the {name} server did not start: {err.one_line()}")
                return
        self._died(name, server_mode, died)

    def _died(self, name: str, server_mode: Mode | None, cell: Cell | None) -> None:
        if cell is None or cell.failure is None:
            return
        why = cell.failure
        evidence = why.get("evidence")
        self.deaths[name] = {
            "cell": cell.label,
            "server_run": cell.server_run,
            "kind": why.get("kind"),
            "phase": why.get("phase"),
            "reason": why.get("reason"),
            "evidence": evidence[:3] if isinstance(evidence, list) else [],
        }
        self.run.update(server_deaths=self.deaths)
        text = f"the {name} server died during cell {cell.label}: {why.get('phase')}: {why.get('reason')}"
        if server_mode is None:
            raise ServerDied(text, hint=f"the finished cells are kept; continue with --resume {self.run.path}")
        _say(self.opts, text)


def compare(
    experiment: ExperimentSpec | str, opts: CompareOptions = CompareOptions(), notes: tuple[str, ...] = ()
) -> CompareResult:
    """Run every cell not yet recorded, then judge each variant against the baseline."""
    spec = experiment if isinstance(experiment, ExperimentSpec) else load_experiment(experiment)
    profile = load_profile(spec.path(spec.profile))
    plan = check_plan(plan_experiment(spec, profile.args), profile)
    plan = replace(plan, notes=plan.notes + tuple(notes))
    if opts.url and plan.server_modes():
        names = ", ".join(m.name for m in plan.server_modes())
        raise UsageError(
            f"--url runs client-side modes only; {names} change the server",
            hint="drop --url so oomkit launches each server from the profile",
        )
    run = _folder(spec, plan, opts)
    if opts.on_folder:
        opts.on_folder(run)
    began = time.monotonic()
    runner = _Runner(run, spec, profile, opts.repeats or spec.repeats, opts)
    try:
        for server_mode, modes in _groups(plan):
            runner.group(server_mode, modes)
    except KeyboardInterrupt:
        run.finish("interrupted", reason="interrupted", compare=runner.totals())
        raise
    except Exception as err:
        run.finish("failed", reason=_reason(err), error=f"{type(err).__name__}: {err}", compare=runner.totals())
        raise
    data = _result(run, plan, runner, time.monotonic() - began)
    write_json_atomic(
        run.file("compare.json", "the comparison: cells, per-metric verdicts, restarts"), redact_obj(data)
    )
    run.finish("complete", compare={**runner.totals(), "request_set_id": data["request_set_id"]})
    return CompareResult(run.path, data)


def _reason(err: Exception) -> str:
    if isinstance(err, ServerDied):
        return "baseline_server_died"
    if isinstance(err, LaunchFailed):
        return f"baseline_{err.result.reason or 'failed'}"
    return "error"


def _result(run: RunDir, plan: Plan, runner: _Runner, duration_s: float) -> CompareDoc:
    repeats, failures, servers = runner.repeats, runner.failures, runner.servers
    recorded = as_cells(run.read_jsonl("cells.jsonl"))
    cells = [c for c in _latest_cells(recorded) if not c.get("failure")]
    record = as_record(run.manifest())
    unjudged = {BASELINE, *failures, *runner.deaths}  # no cells to judge: it did not start, or its server died
    judged = [m.name for m in plan.modes if m.name not in unjudged]
    comparisons = {name: [v.to_dict() for v in compare_modes(cells, BASELINE, name)] for name in judged}
    return {
        "schema": SCHEMA,
        "experiment": plan.spec.name,
        "experiment_file": plan.spec.source,
        "request_set_id": record.get("request_set_id"),
        "repeats": repeats,
        "baseline": {
            "profile": plan.spec.path(plan.spec.profile),
            "concurrency": plan.spec.concurrency,
            "sessions": plan.spec.sessions,
            "steps": plan.spec.steps,
        },
        "modes": [m.to_dict() for m in plan.modes],
        "cells": cells,
        "comparisons": comparisons,
        "launch_failures": failures,
        "server_deaths": runner.deaths,
        "failed_cells": [c for c in recorded if c.get("failure")],
        "server_runs": servers,
        **runner.totals(),
        "reset_methods": sorted({c["reset"] for c in cells}),
        "notes": list(plan.notes),
        "duration_s": round(duration_s, 2),
    }


def _latest_cells(cells: list[CellDoc]) -> list[CellDoc]:
    """One cell per (mode, repeat): a resumed run may have recorded a cell twice; keep the last."""
    by: dict[tuple[str, int], CellDoc] = {}
    for c in cells:
        by[(c["mode"], c["repeat"])] = c
    return sorted(by.values(), key=lambda c: (c["repeat"], c["started_unix_s"]))
