"""What `oomkit ladder` and `oomkit bench` share before any load: the target (a URL, or a server
launched from a profile), the request set (a workload YAML materialised with the server's
tokenizer, or an existing request set reused unchanged) fitted to the server's max_model_len,
and the run folder."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oomkit.errors import InputError, UsageError
from oomkit.fsio import write_json_atomic
from oomkit.loadrun.target import Target, profile_target, url_target
from oomkit.rundir import RunDir, redact_obj
from oomkit.runs import own_create_time
from oomkit.serial import JsonObject
from oomkit.workload.fit import DoesNotFit, fit_request_set
from oomkit.workload.materialise import materialise
from oomkit.workload.requestset import KIND, RequestSet, read_request_set
from oomkit.workload.spec import DEFAULT_WORKLOAD, load_workload, parse_workload
from oomkit.workload.tokens import server_counter

REQUEST_SET_NOTE = "the requests sent (reuse it with --workload for an identical rerun)"
FIT_FILE = "fit.json"
FIT_NOTE = "the request set fitted to the server's max_model_len: requests trimmed, or the one refused"


@dataclass(frozen=True)
class TargetSpec:
    url: str | None = None
    profile: str | None = None
    api_key: str | None = None
    model: str | None = None
    runs_dir: str = "runs"
    label: str | None = None
    memory: str = "auto"
    """auto, nvml, rss, none, or the URL of a DCGM exporter's /metrics."""


@contextlib.contextmanager
def open_target(spec: TargetSpec) -> Iterator[Target]:
    if bool(spec.url) == bool(spec.profile):
        raise UsageError("give exactly one of --profile PROFILE or --url URL")
    if spec.url:
        yield url_target(spec.url, spec.api_key, spec.model)
        return
    with profile_target(spec.profile, spec.runs_dir, spec.label, spec.model) as target:  # type: ignore[arg-type]
        yield target


def is_request_set(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            return f'"kind":"{KIND}"' in fh.readline()
    except (OSError, UnicodeDecodeError):
        return False


def request_set_for(workload: str | None, target: Target) -> tuple[RequestSet, str | None]:
    """A request set for this target, and a note when token sizes are only approximate. Without a
    workload file the built-in default agent workload is used (every field at its default)."""
    if workload is None:
        counter, note = server_counter(target.base_url, target.model, target.api_key)
        return materialise(parse_workload(DEFAULT_WORKLOAD), counter, note), note
    path = Path(workload)
    if not path.is_file():
        raise InputError(f"{workload}: no such workload or request set file", hint="see examples/workload-agent.yaml")
    if is_request_set(path):
        return read_request_set(path), None
    spec = load_workload(path)
    counter, note = server_counter(target.base_url, target.model, target.api_key)
    return materialise(spec, counter, note), note


def run_folder(target: Target, spec: TargetSpec, kind: str) -> tuple[RunDir, bool]:
    """The launch's folder when oomkit started the server; else a new one. True when it is ours."""
    if target.run_dir is not None:
        return target.run_dir, False
    run = RunDir.create(spec.runs_dir, spec.label or kind, kind=kind)
    run.update(oomkit_create_time=own_create_time())  # with oomkit_pid: `oomkit runs` tells a dead owner
    return run, True


def fit_to_target(run: RunDir, rs: RequestSet, target: Target) -> tuple[RequestSet, str | None]:
    """The request set fitted to the target's max_model_len (history trimmed), recorded in
    fit.json, and the line to print when anything was trimmed or the limit is unknown. Raises
    DoesNotFit, before any load, when a request cannot fit even without history."""
    limit, source = target.context_limit()
    try:
        fitted, report = fit_request_set(rs, limit)
    except DoesNotFit as err:
        _write_fit(run, {**err.to_dict(), "source": source})
        raise
    _write_fit(run, {**report.to_dict(), "source": source})
    note = report.note()
    return fitted, f"{note}, see {FIT_FILE}" if note else None


def _write_fit(run: RunDir, data: JsonObject) -> None:
    write_json_atomic(run.file(FIT_FILE, FIT_NOTE), redact_obj(data))
