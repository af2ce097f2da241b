"""`oomkit plan --compare`: plan every candidate layout for the given GPU counts and rank them:
those that fit the target first, then those that load, then by KV headroom (blocks free for the
target, or total concurrency). A prefill/decode (PD) split is planned as two pools."""

from __future__ import annotations

from dataclasses import replace
from typing import NotRequired, TypedDict

from oomkit.errors import OomkitError
from oomkit.plan.catalog import find_gpu, find_model
from oomkit.plan.core import Plan, PlanRequest, plan
from oomkit.plan.layouts import Layout, candidates
from oomkit.plan.model import ModelShape
from oomkit.serial import JsonObject


class CompareRow(TypedDict):
    """One ranked layout; `oomkit plan --compare --json` prints the rows as they are."""

    label: str
    gpus: int
    fits_load: bool
    fits_one_request: bool
    fits_target: bool | None
    weights_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    engines: int
    total_concurrency: float
    target_headroom: float | None  # free blocks over the blocks the target needs
    layout: NotRequired[JsonObject]  # a PD split: {"prefill": ..., "decode": ...}
    prefill: NotRequired[CompareRow]  # a PD split: the prefill pool's own row
    error: NotRequired[str]  # the planner refused this layout


def _request_for(req: PlanRequest, layout: Layout) -> PlanRequest:
    return replace(
        req, gpus=None, tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep, dcp=layout.dcp, pool=layout.pool
    )


def _row(p: Plan, label: str, gpus: int) -> CompareRow:
    c, g = p.capacity, p.per_gpu_gib()
    headroom = None
    if p.target_blocks:
        headroom = round((c.num_blocks - 1) / p.target_blocks, 3)
    return CompareRow(
        label=label,
        gpus=gpus,
        fits_load=p.fits_load,
        fits_one_request=p.fits_load and c.fits_one_request,
        fits_target=p.fits_target,
        weights_gib=g["weights_gib"],
        kv_cache_gib=g["kv_cache_gib"],
        kv_cache_tokens=c.kv_cache_tokens,
        max_concurrency=round(c.max_concurrency, 2),
        engines=p.layout.dp,
        total_concurrency=round(c.max_concurrency * p.layout.dp, 2),
        target_headroom=headroom,
        layout=p.layout.to_dict(),
    )


def compare(req: PlanRequest, gpu_counts: list[int]) -> list[CompareRow]:
    m = find_model(req.model, req.hf_overrides or None)
    gpu = find_gpu(req.gpu, req.gpu_memory_gib)
    rows: list[CompareRow] = []
    layouts = candidates(m, gpu_counts, gpu.nvlink_domain)
    serve = [x for x in layouts if x.pool == "serve"]
    for layout in serve:
        try:
            rows.append(_row(plan(_request_for(req, layout), model=m), layout.label, layout.gpus))
        except OomkitError as err:
            rows.append(_failed(layout.label, layout.gpus, err))
    prefill = [x for x in layouts if x.pool == "prefill"]
    decode = [x for x in layouts if x.pool == "decode"]
    for pre, dec in zip(prefill, decode, strict=False):
        rows.append(_pd_row(req, m, pre, dec))
    return sorted(rows, key=_rank)


def _pd_row(req: PlanRequest, m: ModelShape, pre: Layout, dec: Layout) -> CompareRow:
    label = f"PD prefill {pre.label.split(' ', 1)[1]} + decode {dec.label.split(' ', 1)[1]}"
    try:
        # The prefill pool needs one max-length prompt at a time; the decode pool holds the target.
        p = plan(replace(_request_for(req, pre), concurrency=None, context=None), model=m)
        d = plan(_request_for(req, dec), model=m)
    except OomkitError as err:
        return _failed(label, pre.gpus + dec.gpus, err)
    row = _row(d, label, pre.gpus + dec.gpus)
    row["fits_load"] = p.fits_load and d.fits_load
    row["fits_one_request"] = row["fits_one_request"] and p.fits_load and p.capacity.fits_one_request
    row["prefill"] = _row(p, pre.label, pre.gpus)
    row["layout"] = {"prefill": pre.to_dict(), "decode": dec.to_dict()}
    return row


def _failed(label: str, gpus: int, err: OomkitError) -> CompareRow:
    return CompareRow(
        label=label,
        gpus=gpus,
        fits_load=False,
        fits_one_request=False,
        fits_target=None,
        weights_gib=0.0,
        kv_cache_gib=0.0,
        kv_cache_tokens=0,
        max_concurrency=0.0,
        engines=0,
        total_concurrency=0.0,
        target_headroom=None,
        error=err.one_line(),
    )


def _rank(row: CompareRow) -> tuple[bool, bool, bool, float, float, int]:
    return (
        not row["fits_target"],
        not row["fits_load"],
        not row["fits_one_request"],
        -(row["target_headroom"] or 0),
        -row["total_concurrency"],
        row["gpus"],
    )
