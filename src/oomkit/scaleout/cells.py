"""Run independent cells in parallel: local worker processes by default, Ray tasks on a cluster when
asked. A cell is one unit of a sweep (a forecast of one layout at one load and seed); the function
that runs it must be a module-level function so both back ends can ship it to a worker.

A cell that raises, or whose worker dies, comes back as a `CellOutcome` with its error: one bad cell
never costs the sweep. Results come back in the order of the cells, whatever order they finished in,
so the same cells give the same list on either back end."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

from oomkit.scaleout.ray_backend import RayTarget, ray_map

CellFn = Callable[[Any], Any]


@dataclass(frozen=True)
class CellOutcome:
    """What one cell gave: its result, or why it has none."""

    index: int
    key: str
    result: Any | None
    error: str | None
    wall_s: float
    worker: str
    """Where it ran: `local:<pid>` or `ray:<node ip>:<pid>`."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Backend:
    """Where cells run. `ray` None: local processes; else a Ray cluster (address "auto"/"local"/
    "ray://host:10001" or None for RAY_ADDRESS or a new local instance)."""

    workers: int | None = None
    ray: RayTarget | None = None

    @property
    def name(self) -> str:
        return "local" if self.ray is None else "ray"


def run_cells(fn: CellFn, cells: Sequence[Any], keys: Sequence[str], backend: Backend = Backend()) -> list[CellOutcome]:
    """Run `fn(cell)` for every cell and return one outcome per cell, in the cells' order."""
    if len(keys) != len(cells):
        raise ValueError("one key per cell")
    if not cells:
        return []
    if backend.ray is not None:
        raw = ray_map(run_one, fn, list(cells), backend.ray, backend.workers)
    elif _workers(backend, len(cells)) == 1:
        raw = [run_one(fn, cell) for cell in cells]
    else:
        raw = _local_map(fn, list(cells), _workers(backend, len(cells)))
    return [CellOutcome(index, key, *row) for index, (key, row) in enumerate(zip(keys, raw, strict=True))]


def run_one(fn: CellFn, cell: Any) -> tuple[Any | None, str | None, float, str]:
    """Runs in the worker: the cell's result or its error as text, never an exception, so a bad
    cell cannot take the pool or the Ray task's retries with it."""
    started = time.monotonic()
    try:
        result, error = fn(cell), None
    except Exception as err:  # noqa: BLE001 - every failure of a cell is that cell's result
        result, error = None, f"{type(err).__name__}: {err}"
    return result, error, round(time.monotonic() - started, 3), _where()


def _where() -> str:
    ray_node = os.environ.get("OOMKIT_RAY_NODE")
    return f"ray:{ray_node}:{os.getpid()}" if ray_node else f"local:{os.getpid()}"


def _workers(backend: Backend, n_cells: int) -> int:
    wanted = backend.workers or os.cpu_count() or 1
    return max(1, min(wanted, n_cells))


def _local_map(fn: CellFn, cells: list[Any], workers: int) -> list[tuple[Any | None, str | None, float, str]]:
    """Cells over a pool of spawned processes (spawn, not fork: a parent that imported vLLM or
    holds threads forks badly). A worker that dies (OOM kill, segfault) breaks the pool: the cells
    it had not finished are reported as lost with that reason, the others keep their results."""
    results: dict[int, tuple[Any | None, str | None, float, str]] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures: dict[Future[Any], int] = {pool.submit(run_one, fn, cell): i for i, cell in enumerate(cells)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                results[futures[future]] = _collect(future)
    return [results[i] for i in range(len(cells))]


def _collect(future: Future[Any]) -> tuple[Any | None, str | None, float, str]:
    try:
        return future.result()
    except BrokenProcessPool:
        return None, "the worker process died before the cell finished (killed or crashed)", 0.0, "local:?"
