"""Evidence runs for a decision: oomkit run folders (launch, ladder, bench, compare) and imported
results (vllm bench serve, GuideLLM). A folder from another oomkit version is refused with what it
lacks; runs that sent different request sets are refused: the comparison would be meaningless."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomkit.errors import WRONG_SHAPE, InputError
from oomkit.fsio import JSON_ERRORS, is_dir
from oomkit.imports import ImportedRun, read_import
from oomkit.rundir import MANIFEST, SCHEMA

COMPARE_SCHEMA = "oomkit.compare/1"
# What this oomkit reads from each kind of file; a folder without them was written by another version.
REQUIRED = {
    "manifest": ("schema", "run_id", "kind", "state", "files"),
    "launch": ("phases", "verdict", "figures"),
    "ladder.json": ("request_set_id", "steps", "knee", "poc"),
    "bench.json": ("request_set_id", "options", "client", "server", "agents"),
    "compare.json": ("schema", "request_set_id", "modes", "cells", "comparisons"),
}


@contextmanager
def written_by_oomkit(refs: list[str]) -> Iterator[None]:
    """Run-folder files are oomkit's own, but one edited by hand, cut short or written by another
    version can hold anything: reading such a field is unusable input (one line), not a traceback."""
    try:
        yield
    except WRONG_SHAPE as err:
        raise InputError(
            f"{', '.join(refs)}: a file of the run folder has a field of an unexpected shape "
            f"({type(err).__name__}: {str(err)[:160]})",
            hint="was a file in it edited or cut short? rerun that stage, or leave the run out",
        ) from None


@dataclass(frozen=True)
class RunEvidence:
    path: str
    kind: str
    """launch, ladder, bench, compare (oomkit folders) or import."""
    manifest: dict[str, Any] = field(default_factory=dict)
    ladder: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    imported: ImportedRun | None = None
    servers: tuple[RunEvidence, ...] = ()
    """The launch folders a compare folder's servers ran in."""

    @property
    def request_set_id(self) -> str | None:
        for source in (self.compare, self.ladder, self.bench):
            if source and source.get("request_set_id"):
                return str(source["request_set_id"])
        return self.imported.request_set_id if self.imported else None

    @property
    def launched(self) -> bool:
        return "phases" in self.manifest or "command" in self.manifest

    def file(self, name: str) -> str:
        return str(Path(self.path) / name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "request_set_id": self.request_set_id,
            "run_id": self.manifest.get("run_id"),
            "state": self.manifest.get("state"),
            "servers": [s.path for s in self.servers],
        }


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, *JSON_ERRORS) as err:  # UnicodeDecodeError is a ValueError
        raise InputError(f"{path}: unreadable ({str(err)[:200]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def _need(data: dict[str, Any], what: str, where: Path, version: Any) -> None:
    missing = [k for k in REQUIRED[what] if k not in data]
    if missing:
        raise InputError(
            f"{where}: written by oomkit {version or 'of another version'}: {what} lacks {', '.join(missing)}",
            hint="rerun that stage with this oomkit, or leave the run out",
        )


def read_folder(path: Path) -> RunEvidence:
    manifest = _json(path / MANIFEST)
    version = manifest.get("oomkit_version")
    if manifest.get("schema") != SCHEMA:
        raise InputError(
            f"{path}: run folder schema {manifest.get('schema')!r} (oomkit {version or '?'}); this "
            f"oomkit reads {SCHEMA}",
            hint="rerun it with this oomkit",
        )
    _need(manifest, "manifest", path / MANIFEST, version)
    if manifest["state"] == "running":
        raise InputError(f"{path}: still running (state running)", hint="wait until it ends, or stop it")
    if manifest["kind"] == "launch":
        _need(manifest, "launch", path / MANIFEST, version)
    found: dict[str, dict[str, Any] | None] = {}
    for name in ("ladder.json", "bench.json", "compare.json"):
        file = path / name
        data = _json(file) if file.is_file() else None
        if data is not None:
            _need(data, name, file, version)
        found[name] = data
    comp = found["compare.json"]
    if comp is not None and comp["schema"] != COMPARE_SCHEMA:
        raise InputError(f"{path}/compare.json: schema {comp['schema']!r}; this oomkit reads {COMPARE_SCHEMA}")
    if manifest["kind"] == "compare" and comp is None:
        raise InputError(
            f"{path}: a compare folder without compare.json (the experiment did not finish)",
            hint=f"resume it: oomkit compare EXPERIMENT --resume {path}",
        )
    servers = tuple(
        read_folder(Path(p)) for p in sorted(set((comp or {}).get("server_runs", {}).values())) if p and is_dir(p)
    )
    kind = (
        "compare"
        if comp
        else "ladder"
        if found["ladder.json"]
        else "bench"
        if found["bench.json"]
        else manifest["kind"]
    )
    return RunEvidence(str(path), kind, manifest, found["ladder.json"], found["bench.json"], comp, None, servers)


def read_evidence(ref: str, runs_dir: str = "runs") -> RunEvidence:
    """A run folder (path, id or id prefix under runs_dir) or an imported result file."""
    p = Path(ref)
    if p.is_file():
        return RunEvidence(str(p), "import", imported=read_import(p))
    if p.is_dir() and not (p / MANIFEST).is_file():
        raise InputError(f"{p}: not a run folder (no {MANIFEST})", hint="give runs/<run_id> or a result JSON file")
    if not p.is_dir():
        from oomkit.rundir import find_run

        p = find_run(ref, runs_dir).path
    return read_folder(p)


def same_request_set(runs: list[RunEvidence]) -> str | None:
    """The one request set every run that sent load used; refuses a mix."""
    ids: dict[str, list[str]] = {}
    for r in runs:
        if r.request_set_id:
            ids.setdefault(r.request_set_id, []).append(r.path)
    if len(ids) > 1:
        listed = "; ".join(f"{i} in {', '.join(paths)}" for i, paths in ids.items())
        raise InputError(
            f"the runs used different request sets ({listed}): a decision across them would compare "
            "different traffic and be meaningless",
            hint="rerun with the same request-set.jsonl (--workload <run>/request-set.jsonl), "
            "or decide on each set separately",
        )
    return next(iter(ids), None)


def load_all(refs: list[str], runs_dir: str = "runs") -> tuple[list[RunEvidence], str | None]:
    if not refs:
        raise InputError("no runs given", hint="oomkit decide RUN... --requirements R.yaml")
    runs = [read_evidence(r, runs_dir) for r in refs]
    return runs, same_request_set(runs)
