"""oomkit.scaleout: cells over local processes and over a real local Ray instance (2 CPUs)."""

from __future__ import annotations

import importlib.util
import os

import pytest
from _scaleout_cells import dies_on_seed_one, fails_on_odd, seeded_walk

from oomkit.errors import MissingDependency
from oomkit.scaleout import Backend, RayTarget, run_cells
from oomkit.scaleout.ray_backend import import_ray

CELLS = [{"seed": seed, "scale": 10} for seed in range(6)]
KEYS = [f"seed{c['seed']}" for c in CELLS]
HAS_RAY = importlib.util.find_spec("ray") is not None


def test_in_process_and_local_processes_agree() -> None:
    serial = run_cells(seeded_walk, CELLS, KEYS, Backend(workers=1))
    pooled = run_cells(seeded_walk, CELLS, KEYS, Backend(workers=2))
    assert [o.result for o in serial] == [o.result for o in pooled]
    assert [o.key for o in pooled] == KEYS
    assert all(o.ok for o in pooled)
    assert {o.worker.split(":")[0] for o in pooled} == {"local"}
    assert len({o.worker for o in pooled}) >= 1


def test_a_failing_cell_is_reported_not_fatal() -> None:
    outcomes = run_cells(fails_on_odd, CELLS, KEYS, Backend(workers=2))
    assert [o.ok for o in outcomes] == [True, False, True, False, True, False]
    assert outcomes[1].error == "ValueError: odd seed 1"
    assert outcomes[2].result == 2


def test_a_dead_worker_loses_only_unfinished_cells() -> None:
    outcomes = run_cells(dies_on_seed_one, CELLS[:2], KEYS[:2], Backend(workers=2))
    assert not outcomes[1].ok and "died" in (outcomes[1].error or "")


def test_one_key_per_cell() -> None:
    with pytest.raises(ValueError):
        run_cells(seeded_walk, CELLS, KEYS[:2])


def test_without_ray_the_flag_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(MissingDependency, match="Ray") as err:
        import_ray()
    assert "oomkit[ray]" in (err.value.hint or "")


def test_ray_address_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert RayTarget().resolved_address() == "head:6379"
    assert RayTarget("local").resolved_address() is None
    assert RayTarget("ray://x:10001").resolved_address() == "ray://x:10001"
    monkeypatch.delenv("RAY_ADDRESS")
    assert RayTarget().resolved_address() is None


@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (the `ray` extra)")
def test_ray_gives_the_same_results_and_reports_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    local = run_cells(seeded_walk, CELLS, KEYS, Backend(workers=2))
    on_ray = run_cells(seeded_walk, CELLS, KEYS, Backend(workers=2, ray=RayTarget("local", 2)))
    assert [o.result for o in on_ray] == [o.result for o in local]
    assert all(o.worker.startswith("ray:") for o in on_ray)
    failing = run_cells(fails_on_odd, CELLS, KEYS, Backend(workers=2, ray=RayTarget("local", 2)))
    assert [o.ok for o in failing] == [True, False, True, False, True, False]
    died = run_cells(dies_on_seed_one, CELLS[:3], KEYS[:3], Backend(workers=2, ray=RayTarget("local", 2)))
    assert [o.ok for o in died] == [True, False, True]
    assert "Ray task lost" in (died[1].error or "")
