"""Resume-or-create for the folders that gather other runs (a comparison, an investigation): with
a reference, reopen that folder after the caller has checked it is the same job; without, make a
new one recording what the job is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from oomkit.rundir import RunDir, find_run
from oomkit.serial import JsonObject


@dataclass(frozen=True)
class FolderSpec:
    kind: str
    """The manifest's `kind` of a new folder (compare, investigation)."""
    label: str
    """The new folder's label (the start of its run id)."""
    record: JsonObject
    """Written into a new folder's manifest: what a resume checks against."""
    reopened: JsonObject = field(default_factory=lambda: {"state": "running"})
    """Written into a reopened folder's manifest."""


def resume_or_create(resume: str | None, runs_dir: str, spec: FolderSpec, check: Callable[[RunDir], None]) -> RunDir:
    """The folder `resume` names (a path or run id under `runs_dir`), once `check` has accepted it
    (it raises InputError, with its own words, for a folder of another kind or job); else a new
    folder under `runs_dir`."""
    if resume:
        run = find_run(resume, runs_dir)
        check(run)
        run.update(**spec.reopened)
        return run
    run = RunDir.create(runs_dir, spec.label, kind=spec.kind)
    run.update(**spec.record)
    return run
