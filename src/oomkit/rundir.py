"""The run folder: one directory per run, shared by every stage that records something.

Layout (documented in docs/run-folder.md):

    <runs_dir>/<run_id>/
        manifest.json     what ran, how, when, and how it ended (rewritten atomically)
        server.log        the vLLM server's stdout+stderr, redacted
        memory.jsonl      memory samples taken while the server ran
        ...               later stages add their own files and list them in manifest["files"]

The manifest is the one file a reader opens first. Its `state` is `running` while a process owns
the folder, then one of `complete`, `interrupted`, `failed`. Every write goes through
`oomkit.redact`, so a secret given in a profile never reaches the disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets as _secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oomkit import __version__
from oomkit.errors import InputError
from oomkit.fsio import JSON_ERRORS, JsonlWriter, json_object, read_jsonl, write_json_atomic
from oomkit.redact import MASK, SECRET_ENV, redact
from oomkit.serial import JsonObject

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
SCHEMA = "oomkit.run/1"
STATES = ("running", "complete", "interrupted", "failed")
FINAL_STATES = STATES[1:]
_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# Keys whose string value is a secret whatever it looks like: vLLM arg names (api_key, hf_token)
# and environment variable names (HF_TOKEN, VLLM_API_KEY, any upper-case name SECRET_ENV flags).
_SECRET_KEY = re.compile(r"(?i)(^|[_-])(api[_-]?key|token|secret|password|passwd|credentials?)$")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like value; a value under a secret-named key is masked."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(str(k)): _redact_item(str(k), v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


def _redact_item(key: str, value: Any) -> Any:
    secret_name = _SECRET_KEY.search(key) or (key.isupper() and SECRET_ENV.search(key))
    if secret_name and isinstance(value, str) and value:
        return MASK
    if secret_name and isinstance(value, (list, tuple)):
        return [_redact_item(key, v) for v in value]  # vLLM's api_key is a list of keys
    return redact_obj(value)


class RunDir:
    """A run folder on disk. `create` makes a new one; `open` reads an existing one."""

    def __init__(self, path: Path, manifest: JsonObject):
        self.path = path
        self._manifest = manifest

    @classmethod
    def create(
        cls, runs_dir: str | os.PathLike[str] = "runs", label: str | None = None, kind: str = "launch"
    ) -> RunDir:
        base = Path(runs_dir)
        base.mkdir(parents=True, exist_ok=True)
        run_id = _new_run_id(label)
        path = base / run_id
        path.mkdir()  # exclusive: the random suffix makes a clash an error worth seeing
        manifest: JsonObject = {
            "schema": SCHEMA,
            "run_id": run_id,
            "kind": kind,
            "label": label,
            "state": "running",
            "created_at": now_iso(),
            "oomkit_version": __version__,
            "oomkit_pid": os.getpid(),
            "files": {MANIFEST: "this file"},
        }
        run = cls(path, manifest)
        run.write()
        return run

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        p = Path(path)
        file = p / MANIFEST
        if not file.is_file():
            raise InputError(
                f"{p}: not a run folder (no {MANIFEST})",
                hint="give a folder made by `oomkit launch`, e.g. runs/<run_id>",
            )
        try:
            manifest = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, *JSON_ERRORS) as err:
            raise InputError(f"{file}: unreadable manifest: {str(err)[:200]}") from err
        if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
            raise InputError(f"{file}: not an oomkit run manifest (schema {SCHEMA} expected)")
        return cls(p, manifest)

    @property
    def run_id(self) -> str:
        return str(self._manifest["run_id"])

    @property
    def state(self) -> str:
        return str(self._manifest["state"])

    def manifest(self) -> JsonObject:
        """A copy of the manifest as JSON reads it back: a raw document (other stages add their own
        sections, a person may edit it), so readers narrow what they take from it."""
        return json.loads(json.dumps(self._manifest, default=str))

    def file(self, name: str, description: str | None = None) -> Path:
        """The path of a file in the folder; with a description it is listed in the manifest."""
        if "/" in name or name.startswith("."):
            raise ValueError(f"run folder file names are plain names, not {name!r}")
        if description and json_object(self._manifest.get("files")).get(name) != description:
            self._mutate(lambda m: _list_file(m, name, description))
        return self.path / name

    def jsonl(self, name: str, description: str) -> JsonlWriter:
        return JsonlWriter(self.file(name, description))

    def read_jsonl(self, name: str) -> list[JsonObject]:
        return read_jsonl(self.path / name)

    def update(self, **fields: Any) -> None:
        """Merge top-level fields into the manifest and rewrite it atomically (redacted)."""
        if "state" in fields and fields["state"] not in STATES:
            raise ValueError(f"unknown run state {fields['state']!r}")
        clean = redact_obj(fields)
        self._mutate(lambda m: m.update(clean))

    def _mutate(self, change: Callable[[JsonObject], None]) -> None:
        # Read-modify-write under a lock: several RunDir objects (and processes: a load stage, a
        # --stop) may update one manifest, and none may drop what another wrote.
        with open(self.path / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                current = self._manifest
            change(current)
            self._manifest = current
            self.write()

    def finish(self, state: str, **fields: Any) -> None:
        if state not in FINAL_STATES:
            raise ValueError(f"a run ends as one of {FINAL_STATES}, not {state!r}")
        self.update(state=state, ended_at=now_iso(), **fields)

    def write(self) -> None:
        write_json_atomic(self.path / MANIFEST, redact_obj(self._manifest))

    def reload(self) -> JsonObject:
        self._manifest = RunDir.open(self.path)._manifest
        return self.manifest()


def _list_file(manifest: JsonObject, name: str, description: str) -> None:
    files = manifest.get("files")
    manifest["files"] = {**(files if isinstance(files, dict) else {}), name: description}


def _new_run_id(label: str | None) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    suffix = _secrets.token_hex(2)
    name = _LABEL_CHARS.sub("-", label).strip("-")[:48] if label else ""
    return f"{stamp}-{name}-{suffix}" if name else f"{stamp}-{suffix}"


def find_run(ref: str | os.PathLike[str], runs_dir: str | os.PathLike[str] = "runs") -> RunDir:
    """A run by folder path, or by run id (or a unique prefix of one) under `runs_dir`."""
    p = Path(ref)
    if (p / MANIFEST).is_file():
        return RunDir.open(p)
    base = Path(runs_dir)
    by_id = base.is_dir() and not p.is_absolute() and len(p.parts) == 1  # a path that is not a run is no id
    matches = sorted(d for d in base.glob(f"{ref}*") if (d / MANIFEST).is_file()) if by_id else []
    if len(matches) == 1:
        return RunDir.open(matches[0])
    if not matches:
        raise InputError(
            f"no run folder {str(ref)!r} (looked for a path and under {base}/)",
            hint="give the run folder path printed by `oomkit launch`",
        )
    names = ", ".join(m.name for m in matches[:5])
    raise InputError(f"{ref!r} matches {len(matches)} runs: {names}", hint="give more of the run id")


def latest_run(runs_dir: str | os.PathLike[str] = "runs", state: str | None = None) -> RunDir | None:
    """The newest run folder under `runs_dir` (optionally only those in `state`)."""
    base = Path(runs_dir)
    if not base.is_dir():
        return None
    for d in sorted((d for d in base.iterdir() if (d / MANIFEST).is_file()), reverse=True):
        run = RunDir.open(d)
        if state is None or run.state == state:
            return run
    return None
