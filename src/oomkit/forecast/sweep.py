"""A forecast sweep (issue 18): several layouts on the same traffic, one cell per layout, run through
oomkit.scaleout.cells (local spawned processes by default, Ray tasks with `--ray`). Each cell gets
what it needs from the driver (the loaded traffic and the calibration, so a Ray node needs neither
the workload file nor the run folder) and its own step and time limit, so a layout forecasts the
same wherever and in whatever order it runs. A cell that raises or whose worker dies comes back as
its layout's `error`; the others keep their results, in the order the layouts were given."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from oomkit.forecast.result import LayoutForecast, PlanSummary
from oomkit.forecast.run import ForecastRequest, forecast_layout
from oomkit.forecast.simulate import Budget
from oomkit.forecast.steptime import StepTimeModel
from oomkit.forecast.traffic import Traffic
from oomkit.loadrun.knee import Knee
from oomkit.plan import PlanRequest
from oomkit.plan.layouts import Layout
from oomkit.scaleout.cells import Backend, CellOutcome, run_cells

FAILED = "failed"
"""The knee reason of a layout whose cell failed (as `does_not_load` is a refused plan's)."""


@dataclass(frozen=True)
class LayoutCell:
    """One layout of a sweep, with everything its worker needs."""

    req: ForecastRequest
    plan: PlanRequest
    traffic: Traffic
    calibrated: StepTimeModel | None
    vllm_version: str
    """The driver's vLLM, whose accounting the plan follows unless the request names one."""


def layout_cell(cell: LayoutCell) -> LayoutForecast:
    """Runs in the worker: this layout's forecast within its own limits."""
    budget = Budget(cell.req.max_steps, time.monotonic() + cell.req.time_limit_s)
    return forecast_layout(cell.req, cell.plan, cell.traffic, cell.calibrated, budget, cell.vllm_version)


def run_sweep(cells: Sequence[LayoutCell], keys: Sequence[str], backend: Backend) -> list[LayoutForecast]:
    """Every cell's layout forecast in the cells' order; a failed cell as a layout with its error."""
    outcomes = run_cells(layout_cell, list(cells), list(keys), backend)
    return [
        o.result if isinstance(o.result, LayoutForecast) else _failed(cell, o)
        for cell, o in zip(cells, outcomes, strict=True)
    ]


def _failed(cell: LayoutCell, outcome: CellOutcome) -> LayoutForecast:
    preq = cell.plan
    return LayoutForecast(
        layout=Layout(tp=preq.tp or 1, pp=preq.pp or 1, dp=preq.dp or 1, ep=preq.ep).label,
        engines=preq.dp or 1,
        plan=PlanSummary(model=preq.model, gpu=preq.gpu, gpus=preq.gpus),
        engine=None,
        rungs=(),
        knee=Knee(None, FAILED, None),
        notes=(f"the cell ran on {outcome.worker} for {outcome.wall_s:.1f} s",),
        error=outcome.error,
    )
