"""`list_runs(runs_dir)`: every run folder with the state a reader can trust.

A manifest says `running` while its owner works. If the owner died without finishing it (SIGKILL,
a crash, a lost machine), the manifest still says `running`. Such a run is listed as
`interrupted`, reason `owner_gone`; `fix=True` writes that into the manifest. A folder whose
manifest cannot be read is listed as `unreadable` with the reason, never raised.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from oomkit.errors import WRONG_SHAPE, InputError, UsageError
from oomkit.fsio import json_list, json_object
from oomkit.rundir import MANIFEST, SCHEMA, STATES, RunDir
from oomkit.serial import Json, JsonObject

UNREADABLE = "unreadable"
LIST_STATES = STATES + (UNREADABLE,)
LOADS = ("ladder", "bench")  # manifest sections of `oomkit ladder`/`oomkit bench`, resumable with --resume
CREATE_TIME_SLACK_S = 1.0


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    path: Path
    kind: str | None
    label: str | None
    state: str
    """running, complete, interrupted, failed, or unreadable."""
    recorded_state: str | None
    """What manifest.json says (differs from `state` when its owner is gone)."""
    reason: str | None
    created_at: str | None
    ended_at: str | None
    stages: tuple[str, ...]
    """The kind, then the loads recorded in the folder (ladder, bench)."""
    files: tuple[str, ...]
    """Files in the folder (hidden lock and temp files left out)."""
    missing_files: tuple[str, ...]
    """Listed in manifest["files"] but not on disk."""
    owner_pid: int | None
    part_of: str | None
    """The run this folder belongs to (a compare's servers, an investigation's stages)."""
    resumable: bool
    resume_command: str | None

    def to_dict(self) -> JsonObject:
        return {**asdict(self), "path": str(self.path)}


def own_create_time() -> float:
    import psutil

    return float(psutil.Process().create_time())


def process_alive(pid: object, create_time: object = None, not_after: float | None = None) -> bool:
    """True when `pid` runs and is the process meant: its start matches `create_time`, or (without
    one) it started no later than `not_after` (a process started later cannot be the one)."""
    import psutil

    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    if isinstance(create_time, (int, float)):
        return abs(started - float(create_time)) <= CREATE_TIME_SLACK_S
    return not_after is None or started <= not_after + CREATE_TIME_SLACK_S


def owner_alive(manifest: JsonObject) -> bool:
    return process_alive(
        manifest.get("oomkit_pid"), manifest.get("oomkit_create_time"), _timestamp(manifest.get("created_at"))
    )


def _timestamp(iso: object) -> float | None:
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def read_manifest(path: Path) -> tuple[JsonObject | None, str | None]:
    """The manifest, or None and why it cannot be used."""
    file = path / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {MANIFEST}"
    except json.JSONDecodeError as err:
        return None, f"{MANIFEST} is not JSON (line {err.lineno}, column {err.colno}): torn or edited"
    except (OSError, UnicodeDecodeError) as err:
        return None, f"{MANIFEST} cannot be read: {err}"
    except (ValueError, RecursionError) as err:  # an int of 4,300+ digits, `[[[[...` nesting
        return None, f"{MANIFEST} cannot be a manifest ({type(err).__name__}): edited"
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        return None, f"{MANIFEST} is not an oomkit run manifest (schema {SCHEMA} expected)"
    if manifest.get("state") not in STATES:
        return None, f"{MANIFEST} has an unknown state {manifest.get('state')!r}"
    return manifest, None


def list_runs(
    runs_dir: str | os.PathLike[str] = "runs", state: str | None = None, include_parts: bool = False, fix: bool = False
) -> list[RunInfo]:
    """Run folders under `runs_dir`, oldest first. Parts of another run are left out unless
    `include_parts`; `fix` rewrites the manifest of each run whose owner is gone."""
    base = Path(runs_dir)
    if not base.is_dir():
        raise InputError(f"{base}: no such runs folder", hint="runs are recorded under --runs-dir (default ./runs)")
    if state is not None and state not in LIST_STATES:
        raise UsageError(f"--state {state!r}: expected one of {', '.join(LIST_STATES)}")
    folders = sorted(d for d in base.iterdir() if d.is_dir() and not d.name.startswith("."))
    read = {d.name: read_manifest(d) for d in folders}
    parents = _parents({name: m for name, (m, _) in read.items() if m})
    runs = [_info_or_unreadable(d, *read[d.name], parents.get(d.name), base, fix) for d in folders]
    return [r for r in runs if (state is None or r.state == state) and (include_parts or r.part_of is None)]


def _parents(manifests: dict[str, JsonObject]) -> dict[str, str]:
    """Folder name -> the run id of the run that recorded it as one of its parts."""
    out: dict[str, str] = {}
    for name, m in manifests.items():
        for ref in _parts(m):
            child = Path(ref).name
            if child in manifests and child != name:
                out.setdefault(child, name)
    return out


def _parts(m: JsonObject) -> list[str]:
    try:
        return _part_refs(m)
    except WRONG_SHAPE:  # an edited manifest names no parts; the folder itself is judged by _info
        return []


def _part_refs(m: JsonObject) -> list[str]:
    refs: list[Json] = list(json_object(m.get("server_runs")).values())  # compare: one launch per server
    refs += [f.get("run_dir") for f in json_object(m.get("launch_failures")).values() if isinstance(f, dict)]
    for stage in json_object(m.get("stages")).values():  # investigation: ladder, compare, decision, report
        refs.append(stage.get("run_dir") if isinstance(stage, dict) else stage)
    refs += [r.get("server_run") for r in json_list(m.get("resumes")) if isinstance(r, dict)]  # ladder/bench --resume
    return [str(r) for r in refs if isinstance(r, str) and r]


def _info_or_unreadable(
    path: Path, m: JsonObject | None, why: str | None, part_of: str | None, base: Path, fix: bool
) -> RunInfo:
    try:
        return _info(path, m, why, part_of, base, fix)
    except WRONG_SHAPE as err:  # `oomkit runs` lists every folder: an edited manifest is a row, not an error
        why = f"{MANIFEST} has a field of an unexpected shape ({type(err).__name__}): edited or from another version"
        return _info(path, None, why, part_of, base, False)


def _info(path: Path, m: JsonObject | None, why: str | None, part_of: str | None, base: Path, fix: bool) -> RunInfo:
    files = tuple(sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith(".")))
    if m is None:
        return RunInfo(
            path.name, path, None, None, UNREADABLE, None, why, None, None, (), files, (), None, part_of, False, None
        )
    recorded = str(m["state"])  # read_manifest let only one of STATES through
    state, reason = recorded, _text(m.get("reason"))
    if state == "running" and not owner_alive(m):
        state, reason = "interrupted", "owner_gone"
        if fix:
            _fix(path)
    kind = str(m.get("kind") or "?")
    stages = (kind,) + tuple(k for k in LOADS if k != kind and isinstance(m.get(k), dict))
    missing = tuple(sorted(f for f in json_object(m.get("files")) if f not in files))
    command = None if part_of or state in ("running", "complete") else resume_command(m, path.name, base)
    pid = m.get("oomkit_pid")
    return RunInfo(
        str(m.get("run_id") or path.name),
        path,
        _text(m.get("kind")),
        _text(m.get("label")),
        state,
        recorded,
        reason,
        _text(m.get("created_at")),
        _text(m.get("ended_at")),
        stages,
        files,
        missing,
        pid if isinstance(pid, int) else None,
        part_of,
        command is not None,
        command,
    )


def _text(value: Json | None) -> str | None:
    return None if value is None else str(value)


def _fix(path: Path) -> None:
    run = RunDir.open(path)
    if run.state == "running" and not owner_alive(run.manifest()):
        run.finish("interrupted", reason="owner_gone")


def resume_command(m: JsonObject, run_id: str, base: Path) -> str | None:
    """The command that continues this run, or None when nothing can continue it."""
    where = "" if base == Path("runs") else f" --runs-dir {shlex.quote(str(base))}"
    for load in LOADS:
        section = m.get(load)
        if isinstance(section, dict) and "spec" in section and m.get(f"{load}_outcome") is None:
            if load == "bench" and section.get("duration_s") is not None:
                return None  # a --duration bench repeats sessions until a clock runs out: not resumable
            return f"oomkit {load} --resume {run_id}{where}"
    if m.get("kind") == "compare" and m.get("experiment_file"):
        return f"oomkit compare {shlex.quote(str(m['experiment_file']))} --resume {run_id}{where}"
    inv = json_object(m.get("investigation"))
    if m.get("kind") == "investigation" and inv.get("profile") and inv.get("requirements"):
        profile, requirements = shlex.quote(str(inv["profile"])), shlex.quote(str(inv["requirements"]))
        return f"oomkit investigate {profile} --requirements {requirements} --resume {run_id}{where}"
    return None


COLUMNS = ("run", "kind", "state", "reason", "created", "resume")


def render(runs: list[RunInfo]) -> str:
    """A table; a `part of` column appears when parts of other runs are listed."""
    if not runs:
        return "no runs"
    parts = any(r.part_of for r in runs)
    rows = [COLUMNS + ("part of",) * parts]
    rows += [
        (r.run_id, "+".join(r.stages), r.state, _short(r.reason), _when(r.created_at), r.resume_command or "-")
        + (r.part_of or "-",) * parts
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows)


def _short(reason: str | None, width: int = 40) -> str:
    text = (reason or "-").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(iso: str | None) -> str:
    ts = _timestamp(iso) if iso else None
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts is not None else "-"
