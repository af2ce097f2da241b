"""`--resume RUN` for `oomkit ladder` and `oomkit bench`: reopen a run folder that did not finish,
check that the target, workload and options are the ones it recorded, drop torn JSONL tails, and
claim it (state `running`, this process as owner, one more entry in `resumes`).

Every JSONL line carries the `attempt` that wrote it: 0 for the first run, n for the n-th resume.
The records of work that a killed attempt left unfinished stay on disk, but only the records of
finished steps, rungs and sessions are counted again."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from oomkit.client.records import RequestRecord, ToolCall, ToolCheck
from oomkit.errors import InputError
from oomkit.fsio import D, from_fields, json_list, json_object, json_objects
from oomkit.loadrun.prepare import REQUEST_SET_NOTE, TargetSpec, fit_to_target, is_request_set, request_set_for
from oomkit.loadrun.target import Target
from oomkit.rundir import RunDir, find_run, now_iso
from oomkit.runs import own_create_time, owner_alive
from oomkit.serial import Json, JsonObject
from oomkit.workload.fit import DoesNotFit
from oomkit.workload.requestset import RequestSet, read_request_set

REQUEST_SET = "request-set.jsonl"
TAIL_CHUNK = 1 << 16


@dataclass(frozen=True)
class LoadSpec:
    """What a fresh ladder or bench was asked for: its manifest section records it, --resume checks it."""

    kind: str
    """ladder or bench: the manifest section's name."""
    target: TargetSpec
    workload: str | None
    options: JsonObject
    """The options as the section records them (a bench: at its top level; a ladder: under `options`)."""


def new_request_set(
    run: RunDir, target: Target, spec: LoadSpec, *, ours: bool = True
) -> tuple[RequestSet, tuple[str, ...]]:
    """A fresh ladder's or bench's request set, fitted to the server's max_model_len and written
    to its folder with what `--resume` checks and reuses: the workload, the request set id, the
    target as given, the options. A set that cannot fit ends our folder `failed` before any load."""
    workload, given = spec.workload, spec.target
    rs, note = request_set_for(workload, target)
    try:
        rs, fit_note = fit_to_target(run, rs, target)
    except DoesNotFit as err:
        if ours:
            run.finish("failed", reason="request_set_does_not_fit", error=err.one_line())
        raise
    rs.write(run.file(REQUEST_SET, REQUEST_SET_NOTE))
    section = {
        "workload": workload,
        "workload_file": str(Path(workload).resolve()) if workload else None,
        "request_set_id": rs.id,
        "spec": {
            "url": given.url,
            "profile": str(Path(given.profile).resolve()) if given.profile else None,
            "model": given.model,
            "memory": given.memory,
        },
        **spec.options,
    }
    run.update(**{spec.kind: section}, target=target.describe())
    return rs, tuple(n for n in (note, fit_note) if n)


def attempt_of(line: JsonObject) -> int:
    value = line.get("attempt")
    return value if isinstance(value, int) else 0


@dataclass
class ResumeJob:
    run: RunDir
    kind: str
    """ladder or bench: the manifest section (and the `<kind>_outcome` written when it ended)."""
    section: JsonObject
    attempt: int
    spec: TargetSpec
    """The recorded target; the API key is never recorded, so it comes from the command line or env."""
    finished: bool
    """The load had already ended (complete, or stopped by its own failure): nothing is run."""
    torn_lines_dropped: dict[str, int] = field(default_factory=dict)

    def options(self, cls: type[D], given: D, recorded: Json | None) -> D:
        return merge_options(cls, json_object(recorded), given, self.run.path)

    def request_set(self) -> RequestSet:
        rs = read_request_set(self.run.path / REQUEST_SET)
        if rs.id != self.section.get("request_set_id"):
            raise InputError(
                f"{self.run.path}/{REQUEST_SET}: set {rs.id}, but the run recorded "
                f"{self.section.get('request_set_id')}",
                hint="start a new run",
            )
        return rs

    def saved(self) -> JsonObject:
        """The result file (ladder.json, bench.json) of a load that had already finished."""
        path = self.run.path / f"{self.kind}.json"
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(
                f"{path}: the {self.kind} finished but its result cannot be read ({err})", hint="start a new run"
            ) from err
        if not isinstance(saved, dict):
            raise InputError(
                f"{path}: the {self.kind} finished but its result is not a JSON object", hint="start a new run"
            )
        return saved

    def finished_note(self) -> tuple[str, ...]:
        return (f"{self.run.path}: the {self.kind} had already finished; nothing was sent",)

    def notes(self, kept: str) -> tuple[str, ...]:
        torn = ", ".join(f"{name} ({n})" for name, n in self.torn_lines_dropped.items())
        return (f"resumed {self.run.run_id} (attempt {self.attempt}): {kept}",) + (
            (f"half-written last lines dropped: {torn}",) if torn else ()
        )

    def claim(self) -> None:
        self.torn_lines_dropped = drop_torn_tails(self.run.path)
        entry: JsonObject = {
            "attempt": self.attempt,
            "kind": self.kind,
            "at": now_iso(),
            "oomkit_pid": os.getpid(),
            "torn_lines_dropped": {**self.torn_lines_dropped},
        }
        resumes = [*json_list(self.run.manifest().get("resumes")), entry]
        self.run.update(
            state="running",
            ended_at=None,
            oomkit_pid=os.getpid(),
            oomkit_create_time=own_create_time(),
            resumes=resumes,
        )

    def attach(self, target: Target) -> RunDir:
        """Record which server this attempt loads; a launched one's folder points back here."""
        resumes = json_objects(self.run.manifest().get("resumes"))  # claim() wrote the last one
        resumes[-1].update(base_url=target.base_url, server_run=str(target.run_dir.path) if target.run_dir else None)
        self.run.update(resumes=resumes)
        if target.run_dir is not None:
            target.run_dir.update(resume_of=str(self.run.path))
        return self.run

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Claim the folder; a resume that fails before its load ends leaves it in a final state."""
        self.claim()
        try:
            yield
        except BaseException as err:
            if self.run.state == "running":
                if isinstance(err, KeyboardInterrupt):
                    self.run.finish("interrupted")
                else:
                    self.run.finish("failed", error=f"{type(err).__name__}: {err}")
            raise


def open_resume(ref: str, kind: str, given: TargetSpec, workload: str | None) -> ResumeJob:
    """The run to continue; InputError when it is not a `kind` run, is still owned, or was made
    with another target or workload. Nothing is written until `holding()` claims it."""
    run = find_run(ref, given.runs_dir)
    m = run.manifest()
    section = m.get(kind)
    recorded = section.get("spec") if isinstance(section, dict) else None
    if not isinstance(section, dict) or not isinstance(recorded, dict):
        raise InputError(
            f"{run.path}: no `oomkit {kind}` run is recorded there (kind {m.get('kind')})",
            hint=f"give a folder made by `oomkit {kind}`; `oomkit runs` lists them",
        )
    if m.get("state") == "running" and owner_alive(m):
        raise InputError(
            f"{run.path}: still running (oomkit pid {m.get('oomkit_pid')})",
            hint="wait for it, or stop that process first",
        )
    _check_workload(run, section, workload)
    spec = _target(run, recorded, given)
    finished = m.get(f"{kind}_outcome") is not None
    return ResumeJob(run, kind, section, len(json_list(m.get("resumes"))) + 1, spec, finished)


def _check_workload(run: RunDir, section: JsonObject, given: str | None) -> None:
    if given is None:
        return
    path = Path(given)
    if section.get("workload_file") and str(path.resolve()) == section["workload_file"]:
        return
    if path.is_file() and is_request_set(path) and read_request_set(path).id == section.get("request_set_id"):
        return
    raise InputError(
        f"{run.path} was run with workload {section.get('workload') or '(built-in)'}, not {given}",
        hint="resume without --workload (the folder's request set is sent again), or start a new run",
    )


def _norm_url(url: str | None) -> str | None:
    return url.rstrip("/").removesuffix("/v1") if url else None


def _text(value: Json | None) -> str | None:
    return value if isinstance(value, str) else None


def _target(run: RunDir, recorded: JsonObject, given: TargetSpec) -> TargetSpec:
    url, profile, model, memory = (_text(recorded.get(k)) for k in ("url", "profile", "model", "memory"))
    conflicts = []
    if given.url and _norm_url(given.url) != _norm_url(url):
        conflicts.append(f"--url {given.url} (recorded: {url or 'none, it used --profile'})")
    if given.profile and str(Path(given.profile).resolve()) != profile:
        conflicts.append(f"--profile {given.profile} (recorded: {profile or 'none, it used --url'})")
    if given.model and given.model != model:
        conflicts.append(f"--model {given.model} (recorded: {model})")
    if given.memory != "auto" and given.memory != memory:
        conflicts.append(f"--memory {given.memory} (recorded: {memory})")
    if conflicts:
        raise InputError(
            f"{run.path} was recorded with another target: {'; '.join(conflicts)}",
            hint="resume with the recorded target (or leave it out), or start a new run",
        )
    return replace(given, url=url, profile=profile, model=model, memory=memory or given.memory)


def _default(f: Field[Any]) -> object:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def merge_options(cls: type[D], recorded: JsonObject, given: D, where: Path) -> D:
    """The recorded options; a given option that is not at its default must equal the recorded one."""
    kept = {f.name: recorded.get(f.name, _default(f)) for f in fields(cls)}
    conflicts = [
        f"{f.name} {getattr(given, f.name)!r} (recorded: {kept[f.name]!r})"
        for f in fields(cls)
        if getattr(given, f.name) not in (_default(f), kept[f.name])
    ]
    if conflicts:
        raise InputError(
            f"{where} was recorded with other options: {'; '.join(conflicts)}",
            hint="resume with the recorded options (or leave them out), or start a new run",
        )
    return cls(**kept)


def drop_torn_tails(folder: Path) -> dict[str, int]:
    """Cut a half-written last line off every JSONL file (a crash mid-write), so that appends
    start on a line of their own; {file name: lines dropped}."""
    return {p.name: 1 for p in sorted(folder.glob("*.jsonl")) if _drop_torn_tail(p)}


def _drop_torn_tail(path: Path) -> bool:
    with open(path, "rb+") as fh:
        end = fh.seek(0, os.SEEK_END)
        pos, tail = end, b""
        while pos > 0 and b"\n" not in tail:
            step = min(TAIL_CHUNK, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
        if not tail or tail.endswith(b"\n"):
            return False
        cut = tail.rfind(b"\n") + 1
        if _is_record(tail[cut:]):  # whole, only its newline is missing: keep it
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
            return False
        fh.truncate(pos + cut)
        return True


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


_PLAIN = tuple(f.name for f in fields(RequestRecord) if f.name not in ("itl_ms", "tool_calls", "tool_check"))
_REQUIRED = ("request_id", "label", "started_unix_s", "ok")


def record_from_dict(d: JsonObject) -> RequestRecord | None:
    """A requests.jsonl line as the RequestRecord that wrote it; None for a line that is not one."""
    if any(k not in d for k in _REQUIRED):
        return None
    check = d.get("tool_check")
    calls = tuple(
        ToolCall(_text(c.get("id")), _text(c.get("name")), str(c.get("arguments", "")))
        for c in json_objects(d.get("tool_calls"))
    )
    return from_fields(
        RequestRecord,
        {k: d[k] for k in _PLAIN if k in d},
        itl_ms=tuple(v for v in json_list(d.get("itl_ms")) if isinstance(v, int | float)),
        tool_calls=calls,
        tool_check=ToolCheck(bool(check.get("valid")), tuple(str(p) for p in json_list(check.get("problems"))))
        if isinstance(check, dict)
        else None,
    )
