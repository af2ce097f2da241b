"""`oomkit forecast --layouts a,b` as a sweep (issue 18): one cell per layout through
oomkit.scaleout.cells, in this process, in spawned local processes or on a local Ray (2 CPUs); the
same layouts give the same rungs on every back end, in the order given, and a failed cell is that
layout's error, not the sweep's."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("vllm.v1.core.sched.scheduler")

from test_forecast import SMALL, cli_run, small_plan  # noqa: E402

from oomkit.errors import MissingDependency, UsageError  # noqa: E402
from oomkit.forecast import ForecastRequest, forecast  # noqa: E402
from oomkit.forecast.layouts import parse_layouts  # noqa: E402
from oomkit.scaleout import Backend, RayTarget  # noqa: E402

HAS_RAY = importlib.util.find_spec("ray") is not None


def sweep_request(tmp_path: Path, layouts: str = "tp1,dp2") -> ForecastRequest:
    wl = tmp_path / "sweep.yaml"
    wl.write_text(yaml.safe_dump(SMALL), encoding="utf-8")
    return ForecastRequest(
        plan=small_plan(40), workload=str(wl), concurrency=(1, 4), refine=False, layouts=parse_layouts(layouts)
    )


def rungs(f: Any) -> list[list[dict[str, Any]]]:
    return [[r.to_dict() | {"wall_s": 0} for r in lay.rungs] for lay in f.layouts]


def test_local_processes_give_what_one_process_gives_in_the_layouts_order(tmp_path):
    req = sweep_request(tmp_path)
    serial = forecast(req, Backend(workers=1))
    parallel = forecast(req, Backend(workers=2))
    assert [lay.layout for lay in parallel.layouts] == ["TP1", "TP1xDP2"]
    assert rungs(parallel) == rungs(serial) and all(rungs(serial))
    assert rungs(forecast(req)) == rungs(serial)  # no back end: the layouts one after the other


def test_a_failed_cell_is_its_layouts_error_not_the_sweeps(tmp_path, monkeypatch):
    import oomkit.forecast.sweep as sweep

    real = sweep.forecast_layout

    def fails_for_dp2(req: Any, preq: Any, *args: Any) -> Any:
        if preq.dp == 2:
            raise RuntimeError("the worker ran out of memory")
        return real(req, preq, *args)

    monkeypatch.setattr(sweep, "forecast_layout", fails_for_dp2)
    f = forecast(sweep_request(tmp_path), Backend(workers=1))
    ok, failed = f.layouts
    assert ok.error is None and ok.rungs
    assert failed.layout == "TP1xDP2" and failed.rungs == () and failed.knee.reason == "failed"
    assert "RuntimeError: the worker ran out of memory" in (failed.error or "")


def test_the_cli_sweeps_with_workers_and_says_when_ray_is_missing(tmp_path, monkeypatch):
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump(SMALL), encoding="utf-8")
    args = ("--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "512", "--num-gpu-blocks-override", "40")
    res = cli_run(
        *args,
        "--workload",
        str(wl),
        "--concurrency",
        "2",
        "--no-refine",
        "--layouts",
        "tp1,dp2",
        "--json",
        "--workers",
        "1",
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout[res.stdout.index("{") :])
    assert [lay["layout"] for lay in d["layouts"]] == ["TP1", "TP1xDP2"] and all(lay["rungs"] for lay in d["layouts"])
    assert isinstance(cli_run(*args, "--workers", "0").exception, UsageError)

    import oomkit.scaleout.ray_backend as rb

    def no_ray() -> None:
        raise MissingDependency("--ray needs Ray, which is not installed", rb.INSTALL_HINT)

    monkeypatch.setattr(rb, "import_ray", no_ray)
    res = cli_run(*args, "--workload", str(wl), "--layouts", "tp1,dp2", "--ray")
    assert isinstance(res.exception, MissingDependency) and "oomkit[ray]" in (res.exception.hint or "")


@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (the `ray` extra)")
def test_ray_gives_the_same_sweep_as_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    req = sweep_request(tmp_path)
    on_ray = forecast(req, Backend(workers=2, ray=RayTarget("local", 2)))
    assert rungs(on_ray) == rungs(forecast(req, Backend(workers=1)))
