"""Evidence runs for a decision: oomkit run folders (launch, ladder, bench, compare) and imported
results (vllm bench serve, GuideLLM). A folder from another oomkit version is refused with what it
lacks; runs that sent different request sets are refused: the comparison would be meaningless."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from oomkit.compare.document import CompareDoc, as_compare
from oomkit.decide.documents import BenchDoc, LadderDoc, Manifest, as_bench, as_ladder, as_manifest
from oomkit.decide.model import InputDoc
from oomkit.errors import WRONG_SHAPE, InputError
from oomkit.fsio import JSON_ERRORS, is_dir
from oomkit.imports import ImportedRun, read_import
from oomkit.rundir import MANIFEST, SCHEMA
from oomkit.serial import JsonObject

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
    manifest: Manifest = field(default_factory=Manifest)
    ladder: LadderDoc | None = None
    bench: BenchDoc | None = None
    compare: CompareDoc | None = None
    imported: ImportedRun | None = None
    servers: tuple[RunEvidence, ...] = ()
    """The launch folders a compare folder's servers ran in."""

    @property
    def request_set_id(self) -> str | None:
        for source in (self.compare, self.ladder, self.bench):
            if source and source.get("request_set_id"):
                return str(source.get("request_set_id"))
        return self.imported.request_set_id if self.imported else None

    @property
    def launched(self) -> bool:
        return "phases" in self.manifest or "command" in self.manifest

    def file(self, name: str) -> str:
        return str(Path(self.path) / name)

    def to_dict(self) -> InputDoc:
        return {
            "path": self.path,
            "kind": self.kind,
            "request_set_id": self.request_set_id,
            "run_id": self.manifest.get("run_id"),
            "state": self.manifest.get("state"),
            "servers": [s.path for s in self.servers],
        }


def _json(path: Path) -> JsonObject:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, *JSON_ERRORS) as err:  # UnicodeDecodeError is a ValueError
        raise InputError(f"{path}: unreadable ({str(err)[:200]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def _need(data: JsonObject, what: str, where: Path, version: object) -> None:
    missing = [k for k in REQUIRED[what] if k not in data]
    if missing:
        raise InputError(
            f"{where}: written by oomkit {version or 'of another version'}: {what} lacks {', '.join(missing)}",
            hint="rerun that stage with this oomkit, or leave the run out",
        )


def read_folder(path: Path) -> RunEvidence:
    """A run folder's files, checked for the keys every reader needs (REQUIRED), typed by them."""
    raw = _json(path / MANIFEST)
    version = raw.get("oomkit_version")
    if raw.get("schema") != SCHEMA:
        raise InputError(
            f"{path}: run folder schema {raw.get('schema')!r} (oomkit {version or '?'}); this oomkit reads {SCHEMA}",
            hint="rerun it with this oomkit",
        )
    _need(raw, "manifest", path / MANIFEST, version)
    manifest = as_manifest(raw)
    if manifest["state"] == "running":
        raise InputError(f"{path}: still running (state running)", hint="wait until it ends, or stop it")
    if manifest["kind"] == "launch":
        _need(raw, "launch", path / MANIFEST, version)
    ladder, bench = _file(path, "ladder.json", version), _file(path, "bench.json", version)
    comp = _compare(path, version)
    if manifest["kind"] == "compare" and comp is None:
        raise InputError(
            f"{path}: a compare folder without compare.json (the experiment did not finish)",
            hint=f"resume it: oomkit compare EXPERIMENT --resume {path}",
        )
    server_runs = comp.get("server_runs", {}) if comp else {}
    servers = tuple(read_folder(Path(p)) for p in sorted({p for p in server_runs.values() if p}) if is_dir(p))
    kind = "compare" if comp else "ladder" if ladder else "bench" if bench else manifest["kind"]
    return RunEvidence(
        str(path),
        kind,
        manifest,
        as_ladder(ladder) if ladder is not None else None,
        as_bench(bench) if bench is not None else None,
        comp,
        None,
        servers,
    )


def _file(path: Path, name: str, version: object) -> JsonObject | None:
    """One of the folder's result files, with the keys this oomkit reads; None when it has none."""
    file = path / name
    if not file.is_file():
        return None
    data = _json(file)
    _need(data, name, file, version)
    return data


def _compare(path: Path, version: object) -> CompareDoc | None:
    data = _file(path, "compare.json", version)
    if data is None:
        return None
    if data["schema"] != COMPARE_SCHEMA:
        raise InputError(f"{path}/compare.json: schema {data['schema']!r}; this oomkit reads {COMPARE_SCHEMA}")
    return as_compare(data)


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
