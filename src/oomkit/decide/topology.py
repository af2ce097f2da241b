"""Change the layout or add GPUs? With a `deployment` in the requirements the planner ranks layouts
at the current GPU count and at more; without one, the GPUs visible but unused decide. The layouts
decide forecasts when the target exceeds what was measured come from here (candidate_layouts)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from oomkit.decide.documents import whole
from oomkit.decide.facts import DecisionFacts
from oomkit.decide.model import Numbers
from oomkit.errors import OomkitError
from oomkit.plan.layouts import Layout
from oomkit.serial import Json

NODE_MULTIPLES = (1, 2, 3, 4, 6, 8)  # GPU counts tried, in multiples of one node

MemoryVerdict = Literal["change_topology", "expand"]
# The verdict when memory is short, the numbers behind it, and what to do.
MemoryAdvice = tuple[MemoryVerdict, Numbers, list[str]]


def gpus_used(args: Mapping[str, Json]) -> int:
    return max(
        1,
        whole(args.get("tensor_parallel_size"), 1)
        * whole(args.get("pipeline_parallel_size"), 1)
        * whole(args.get("data_parallel_size"), 1),
    )


def _planner(f: DecisionFacts, used: int) -> MemoryAdvice | None:
    d = f.req.deployment
    if d is None:
        return None
    from oomkit.plan.compare import compare
    from oomkit.plan.core import PlanRequest

    counts = sorted({used, *(d.gpus_per_node * k for k in NODE_MULTIPLES)})
    req = PlanRequest(
        model=d.model,
        gpu=d.gpu,
        max_model_len=f.req.longest_request_tokens(),
        concurrency=f.req.concurrent_dialogs,
        context=f.req.longest_request_tokens(),
    )
    try:
        rows = compare(req, [c for c in counts if c >= used])
    except OomkitError as err:
        return "expand", {"planner_error": err.one_line()}, [f"the planner could not rank layouts: {err.one_line()}"]
    fitting = [r for r in rows if r.get("fits_target")]
    same = [r for r in fitting if r["gpus"] == used]
    if same:
        best = same[0]
        return (
            "change_topology",
            {"layout": best["label"], "gpus": used, "planner_row": best},
            [
                f"change the layout to {best['label']} on the same {used} GPUs (planner: fits the target, "
                f"{best['kv_cache_gib']} GiB KV per GPU)"
            ],
        )
    if fitting:
        best = min(fitting, key=lambda r: (r["gpus"], -(r.get("target_headroom") or 0)))
        return (
            "expand",
            {"layout": best["label"], "gpus": best["gpus"], "add_gpus": best["gpus"] - used, "planner_row": best},
            [
                f"expand to {best['gpus']} {d.gpu} GPUs (+{best['gpus'] - used}) as {best['label']} (planner: the "
                "smallest count that fits the target)"
            ],
        )
    return (
        "expand",
        {"gpus_tried": counts},
        [
            f"no layout up to {max(counts)} {d.gpu} GPUs fits the target: "
            "a larger GPU or a smaller model/quantization is needed"
        ],
    )


def topology_or_expand(f: DecisionFacts) -> MemoryAdvice:
    """The verdict when memory, not a setting, is short: `change_topology` or `expand`, with numbers."""
    used = gpus_used(f.profile_args())
    planned = _planner(f, used)
    if planned:
        return planned
    snap = f.env_snapshot() or {}
    visible = len(snap.get("visible_gpu_indices") or snap.get("gpus") or [])
    numbers: Numbers = {"gpus_used": used, "gpus_visible": visible}
    if visible > used:
        tp = 2 ** int(math.log2(visible))
        return (
            "change_topology",
            {**numbers, "tensor_parallel_size": tp},
            [
                f"spread the model over the {visible} GPUs this node has: tensor_parallel_size {tp} (now {used} used)",
                "add `deployment:` (model, gpu) to the requirements for the planner's layout ranking",
            ],
        )
    return (
        "expand",
        numbers,
        [
            "more memory per replica is needed: more GPUs (a larger tensor/pipeline-parallel layout) or larger GPUs",
            "add `deployment:` (model, gpu) to the requirements for the planner's GPU count",
        ],
    )


def engines_needed(target: float, capacity: float | None) -> int | None:
    if not capacity:
        return None
    return math.ceil(target / capacity)


def candidate_layouts(model: str, gpu: str, gpus_per_node: int, used: int) -> list[Layout]:
    """Layouts worth forecasting, fewest GPUs first: the planner's candidates at each count (TP
    inside the NVLink domain, TEP, TPxPP, DEP, DCP; plan.layouts.candidates) and the recipe
    strategies' layouts (env.strategies: TP per node x DP over nodes, DEP, TP x PP), for one to
    eight nodes. Layouts the model's shape refuses are dropped."""
    from oomkit.env.strategies import STRATEGIES, layout
    from oomkit.plan.catalog import find_gpu, find_model
    from oomkit.plan.layouts import candidates, validate

    shape = find_model(model)
    counts = sorted({used, *(gpus_per_node * k for k in NODE_MULTIPLES)})
    out = [lay for lay in candidates(shape, counts, find_gpu(gpu).nvlink_domain) if lay.pool == "serve"]
    for strategy in STRATEGIES.values():
        if strategy.disaggregated or (strategy.expert_parallel and not shape.moe):
            continue
        for nodes in NODE_MULTIPLES if strategy.multi_node else (1,):
            s = layout(strategy, gpus_per_node, gpus_per_node * nodes, nodes=nodes)
            out.append(Layout(tp=s.tp, pp=s.pp, dp=s.dp, ep=s.expert_parallel))
    fitting: list[Layout] = []
    for lay in out:
        try:
            validate(lay, shape)
        except OomkitError:
            continue
        if lay.gpus >= used and lay not in fitting:
            fitting.append(lay)
    return sorted(fitting, key=lambda lay: lay.gpus)
