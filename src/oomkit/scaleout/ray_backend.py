"""The Ray back end: one Ray task per cell. Ray is an optional extra (`pip install 'oomkit[ray]'`),
imported only here and only when a command is given `--ray`; every node must have oomkit installed,
as it has vLLM when Ray serves vLLM multi-node."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from oomkit.errors import MissingDependency

INSTALL_HINT = "pip install 'oomkit[ray]' (Ray 2.9 or newer), then pass --ray [ADDRESS] again"
# A new local instance is for trying a sweep on a laptop or in CI: keep its object store small.
LOCAL_OBJECT_STORE_BYTES = 80 * 2**20
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class RayTarget:
    """Which cluster: an address as `ray.init` takes it ("auto", "ray://head:10001", "host:6379"),
    or None for RAY_ADDRESS when set, else a new local instance with `local_cpus` CPUs."""

    address: str | None = None
    local_cpus: int | None = None

    def resolved_address(self) -> str | None:
        if self.address in (None, "", "local"):
            return None if self.address == "local" else (os.environ.get("RAY_ADDRESS") or None)
        return self.address


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingDependency("--ray needs Ray, which is not installed", INSTALL_HINT) from None
    return ray


def init_kwargs(target: RayTarget, cpus: int | None = None) -> dict[str, Any]:
    """`ray.init` arguments for the target: connect to a cluster, or start a small local one."""
    address = target.resolved_address()
    if address is not None:
        return {"address": address, "log_to_driver": False}
    # Workers of a local instance see the driver's import path, so a cell function from a script
    # or a test module resolves there as it does here.
    path = os.pathsep.join(entry for entry in sys.path if entry)
    return {
        "num_cpus": target.local_cpus or cpus or os.cpu_count(),
        "include_dashboard": False,
        "log_to_driver": False,
        "object_store_memory": LOCAL_OBJECT_STORE_BYTES,
        "runtime_env": {"env_vars": {"PYTHONPATH": path}},
    }


@contextmanager
def connected(target: RayTarget) -> Iterator[Any]:
    """ray.init for the target and ray.shutdown after, unless the caller was already connected."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    ray.init(**init_kwargs(target))
    try:
        yield ray
    finally:
        ray.shutdown()


def ray_map(
    run_one: Callable[..., Any], fn: Callable[[Any], Any], cells: list[Any], target: RayTarget, workers: int | None
) -> list[tuple[Any | None, str | None, float, str]]:
    """`run_one(fn, cell)` as one Ray task per cell, gathered as they finish. No retries: a task
    whose worker or node died is that cell's failure, reported, not silently re-run."""
    with connected(RayTarget(target.address, target.local_cpus or workers)) as ray:
        task = ray.remote(num_cpus=1, max_retries=0)(_on_node)
        refs = [task.remote(run_one, fn, cell) for cell in cells]
        index_of = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, tuple[Any | None, str | None, float, str]] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[index_of[ref]] = _get(ray, ref)
        return [results[i] for i in range(len(cells))]


def _on_node(run_one: Callable[..., Any], fn: Callable[[Any], Any], cell: Any) -> Any:
    import ray

    os.environ["OOMKIT_RAY_NODE"] = ray.util.get_node_ip_address()
    return run_one(fn, cell)


def _get(ray: Any, ref: Any) -> tuple[Any | None, str | None, float, str]:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:  # the worker or its node died; run_one itself never raises
        text = ANSI.sub("", str(err)).strip()
        first_line = text.splitlines()[0] if text else type(err).__name__
        return None, f"Ray task lost: {type(err).__name__}: {first_line[:300]}", 0.0, "ray:?"
