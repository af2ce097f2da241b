"""`oomkit plan --from-log LOG`: read what a real startup printed (via the triage facts), set
the plan's inputs from the logged arguments, show predicted vs printed, and fit the deployment's
non-KV overhead so the next prediction reproduces the printed KV budget."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from oomkit.errors import InputError, UsageError
from oomkit.plan.core import GIB, Plan, PlanRequest, plan
from oomkit.plan.levers import plan_with_levers


@dataclass(frozen=True)
class FigureRow:
    """One figure the log printed, as the plan predicted it before and after the fit."""

    figure: str
    printed: float
    predicted: float | None
    calibrated: float | None
    error_pct: float | None  # predicted against printed, before the fit


@dataclass(frozen=True)
class Calibration:
    log: str  # the log paths, comma separated
    rows: tuple[FigureRow, ...]
    assume: dict[str, float]  # the fitted --assume values
    notes: tuple[str, ...]
    phase: str  # triage's phase of the log


LOGGED_GPU = "logged-gpu"  # --from-log without --gpu: the device the log describes

# vLLM argument name -> PlanRequest field, for the settings a log carries.
ARG_FIELDS = {
    "max_model_len": "max_model_len",
    "max_seq_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "block_size": "block_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching",
    "enforce_eager": "enforce_eager",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "decode_context_parallel_size": "dcp",
    "enable_expert_parallel": "ep",
}

# printed figure -> how to read the same quantity off a plan
COMPARED = (
    ("model_weights_gib", lambda p: p.per_gpu_gib()["weights_gib"]),
    ("available_kv_cache_gib", lambda p: round(p.budget.kv_bytes / GIB, 2)),
    ("num_gpu_blocks", lambda p: p.capacity.num_blocks),
    ("kv_cache_tokens", lambda p: p.capacity.kv_cache_tokens),
    ("max_concurrency", lambda p: round(p.capacity.max_concurrency, 2)),
    ("estimated_max_model_len", lambda p: p.capacity.estimated_max_model_len),
    ("block_size", lambda p: p.kv.block_size),
    ("cuda_graph_gib", lambda p: p.per_gpu_gib()["cudagraph_gib"]),
)


def request_from_facts(req: PlanRequest, facts: Any) -> PlanRequest:
    """Fill what the user left unset from the log's arguments, version and printed totals."""
    changes: dict[str, Any] = {}
    defaults = PlanRequest(model=req.model)
    for arg, fld in ARG_FIELDS.items():
        value = (facts.args or {}).get(arg)
        if value is None or getattr(req, fld) != getattr(defaults, fld) or fld in changes:
            continue
        if fld in ("tp", "pp", "dp", "dcp") and int(value) == 1:
            continue
        if fld == "kv_cache_dtype" and value == "auto":
            continue
        changes[fld] = value
    if req.vllm_version is None and facts.vllm_version:
        changes["vllm_version"] = str(facts.vllm_version)
    figures = facts.figures or {}
    v0_lines = "num_cpu_blocks" in figures or "peak_torch_gib" in figures  # "# CPU blocks", V0 profiling
    if req.vllm_version is None and not facts.vllm_version and (facts.engine == "v0" or v0_lines):
        changes["vllm_version"] = "0.6"  # a V0 log without a version line: the last V0-default series
    if req.max_model_len is None and "max_model_len" not in changes:
        length = figures.get("max_model_len") or figures.get("max_concurrency_tokens")
        if length:
            changes["max_model_len"] = int(length)
    total = figures.get("total_memory_gib") or figures.get("node_total_gib")
    if req.gpu_memory_gib is None and total:
        changes["gpu_memory_gib"] = float(total)
    if req.gpu == LOGGED_GPU and "gpu_memory_gib" not in changes and req.gpu_memory_gib is None:
        raise UsageError("the log prints no device total memory", hint="pass --gpu NAME or --gpu-memory-gib N")
    if changes.get("tp") or changes.get("pp") or changes.get("dp"):
        changes["gpus"] = None
    return replace(req, **changes)


def calibrate(req: PlanRequest, log_paths: list[str]) -> tuple[Calibration, Plan]:
    from oomkit.triage import analyse

    res = analyse(log_paths)
    facts = res.facts
    figures = dict(facts.figures or {})
    if figures.get("available_kv_cache_gib") is None and figures.get("kv_cache_tokens") is None:
        raise InputError(
            f"{', '.join(log_paths)} prints no KV-cache figures to calibrate against",
            hint="use a log that reached 'Available KV cache memory' or 'KV cache size'",
        )
    base_req = request_from_facts(req, facts)
    before = plan(base_req)
    assume = _fit(before, figures)
    after = plan_with_levers(replace(base_req, assume={**base_req.assume, **assume}))
    rows = []
    for name, read in COMPARED:
        printed = figures.get(name)
        if printed is None:
            continue
        pred, cal = read(before), read(after)
        err = None if not printed or pred is None else round(100 * (pred - printed) / abs(printed), 2)
        rows.append(FigureRow(name, printed, pred, cal, err))
    logged = ", ".join(f"{k}={v}" for k, v in sorted(facts.args.items()) if k in ARG_FIELDS) or "none printed"
    version = ".".join(map(str, before.behaviour.version))
    notes = [
        f"vLLM {facts.vllm_version or version + ' (inferred: the log prints no version)'}; "
        f"settings from the log: {logged}"
    ]
    if not assume:
        notes.append("nothing to fit: the log prints no KV budget the planner derives from the device budget")
    return Calibration(", ".join(log_paths), tuple(rows), assume, tuple(notes), res.verdict.phase), after


def _fit(p: Plan, figures: dict[str, Any]) -> dict[str, float]:
    """The non-KV overhead that makes the predicted KV budget equal the printed one. Printed
    activation / CUDA-graph figures (the breakdown line) replace the estimates first."""
    printed_kv = figures.get("available_kv_cache_gib")
    if printed_kv is None or p.budget.mode == "explicit":
        return {}
    if p.budget.mode == "cpu":
        if figures.get("non_kv_gib") is None:
            return {}
        # CPU: kv = requested - worker RSS, and RSS = weights + runtime (cpu_worker.py)
        return {"cpu_runtime_gib": round(max(0.0, figures["non_kv_gib"] - p.budget.weights_bytes / GIB), 3)}
    out: dict[str, float] = {}
    if figures.get("peak_activation_gib") is not None:
        out["activation_gib"] = float(figures["peak_activation_gib"])
    if figures.get("cuda_graph_gib") is not None and p.behaviour.cudagraphs_charged:
        out["cudagraph_gib"] = float(figures["cuda_graph_gib"])
    if out:
        p = plan(replace(p.request, assume={**p.request.assume, **out}))
    residual = p.budget.kv_bytes / GIB - float(printed_kv)  # > 0: the deployment uses more than predicted
    out["other_gib"] = round(max(0.0, p.assumptions["other_gib"].value + residual), 3)
    return out
