"""One entry point for the command line: a plan, a comparison of layouts, or a calibration
against a real log, each with its JSON form and its text form."""

from __future__ import annotations

from dataclasses import dataclass, fields

from oomkit.plan import render
from oomkit.plan.catalog import catalog_rows, gpus
from oomkit.plan.core import PlanRequest
from oomkit.plan.levers import plan_with_levers
from oomkit.serial import JsonObject, to_json_object, to_jsonable


@dataclass(frozen=True)
class Outcome:
    data: JsonObject  # what --json prints
    text: str


def run_plan(req: PlanRequest, compare_gpus: list[int] | None = None, from_log: list[str] | None = None) -> Outcome:
    if from_log:
        from oomkit.plan.calibrate import calibrate

        cal, calibrated = calibrate(req, from_log)
        return Outcome(
            {"calibration": to_jsonable(cal), **calibrated.to_dict()},
            render.calibration_text(cal) + "\n\nnext prediction (calibrated)\n" + render.plan_text(calibrated),
        )
    if compare_gpus:
        from oomkit.plan.compare import compare

        rows = compare(req, compare_gpus)
        target = ""
        if req.concurrency or req.context:
            target = f", target {req.concurrency or 1} x {req.context or 'max_model_len'} tokens"
        head = f"{req.model} on {req.gpu}, GPU counts {', '.join(map(str, compare_gpus))}{target}"
        return Outcome(
            {"compare": to_jsonable(rows), "request": _req_dict(req)}, head + "\n" + render.compare_text(rows)
        )
    p = plan_with_levers(req)
    return Outcome(p.to_dict(), render.plan_text(p))


def catalogs() -> Outcome:
    models, hw = catalog_rows(), gpus()
    lines = ["models:"] + [f"  {m['name']:<22} {m['source']}" for m in models]
    lines += ["", "GPUs:"] + [
        f"  {g.name:<12} {str(g.memory_mib or '-'):>7} MiB  "
        f"{str(g.hbm_bandwidth_gbps or '-'):>5} GB/s  NVLink {g.nvlink_domain:>2}  "
        f"{g.source}"
        for g in hw
    ]
    return Outcome({"models": to_jsonable(models), "gpus": [g.to_dict() for g in hw]}, "\n".join(lines))


def _req_dict(req: PlanRequest) -> JsonObject:
    """The request's fields that are set, as the comparison's JSON states them."""
    given = {f.name: getattr(req, f.name) for f in fields(req)}
    return to_json_object({k: v for k, v in given.items() if v not in (None, {}, False)})
