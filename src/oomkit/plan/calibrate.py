"""`oomkit plan --from-log LOG`: read what a real startup printed (via the triage facts), set
the plan's inputs from the logged arguments, show predicted vs printed, and fit the deployment's
non-KV overhead so the next prediction reproduces the printed KV budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from oomkit.errors import InputError, UsageError
from oomkit.plan.core import GIB, Plan, PlanRequest, plan
from oomkit.plan.levers import plan_with_levers

if TYPE_CHECKING:
    from oomkit.triage.model import Facts


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


def _int(args: Mapping[str, object], *names: str) -> int | None:
    """The first of `names` the log's arguments set, as a whole number (None: unset or unreadable)."""
    value = next((args[n] for n in names if args.get(n) is not None), None)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _float(args: Mapping[str, object], name: str) -> float | None:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _bool(args: Mapping[str, object], name: str) -> bool | None:
    value = args.get(name)
    if value is None or isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1")


def _text(args: Mapping[str, object], name: str) -> str | None:
    value = args.get(name)
    return None if value is None else str(value)


def _parallel(args: Mapping[str, object], name: str) -> int | None:
    size = _int(args, name)
    return None if size == 1 else size  # 1 is the default: it sets nothing


def _figure(figures: Mapping[str, object], key: str) -> float | None:
    """A printed figure as triage read it, an int or a float (the table prints them differently);
    anything else is no figure."""
    value = figures.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


T = TypeVar("T")


def _unless_given(current: T, default: T, logged: T | None) -> T:
    """The logged value where the user left the field at its default, else what the user gave."""
    return logged if logged is not None and current == default else current


def request_from_facts(req: PlanRequest, facts: Facts) -> PlanRequest:
    """Fill what the user left unset from the log's arguments (ARG_FIELDS), version and printed totals."""
    args: Mapping[str, object] = facts.args or {}
    d = PlanRequest(model=req.model)
    kv_dtype = _text(args, "kv_cache_dtype")
    parallel = {name: _parallel(args, f"{name}_parallel_size") for name in ("tensor", "pipeline", "data")}
    out = replace(
        req,
        max_model_len=_unless_given(req.max_model_len, d.max_model_len, _int(args, "max_model_len", "max_seq_len")),
        gpu_memory_utilization=_unless_given(
            req.gpu_memory_utilization, d.gpu_memory_utilization, _float(args, "gpu_memory_utilization")
        ),
        kv_cache_memory_bytes=_unless_given(
            req.kv_cache_memory_bytes, d.kv_cache_memory_bytes, _int(args, "kv_cache_memory_bytes")
        ),
        block_size=_unless_given(req.block_size, d.block_size, _int(args, "block_size")),
        kv_cache_dtype=_unless_given(req.kv_cache_dtype, d.kv_cache_dtype, None if kv_dtype == "auto" else kv_dtype),
        quantization=_unless_given(req.quantization, d.quantization, _text(args, "quantization")),
        max_num_seqs=_unless_given(req.max_num_seqs, d.max_num_seqs, _int(args, "max_num_seqs")),
        max_num_batched_tokens=_unless_given(
            req.max_num_batched_tokens, d.max_num_batched_tokens, _int(args, "max_num_batched_tokens")
        ),
        enable_prefix_caching=_unless_given(
            req.enable_prefix_caching, d.enable_prefix_caching, _bool(args, "enable_prefix_caching")
        ),
        enforce_eager=_unless_given(req.enforce_eager, d.enforce_eager, _bool(args, "enforce_eager")),
        num_gpu_blocks_override=_unless_given(
            req.num_gpu_blocks_override, d.num_gpu_blocks_override, _int(args, "num_gpu_blocks_override")
        ),
        tp=_unless_given(req.tp, d.tp, parallel["tensor"]),
        pp=_unless_given(req.pp, d.pp, parallel["pipeline"]),
        dp=_unless_given(req.dp, d.dp, parallel["data"]),
        dcp=_unless_given(req.dcp, d.dcp, _parallel(args, "decode_context_parallel_size")),
        ep=_unless_given(req.ep, d.ep, _bool(args, "enable_expert_parallel")),
    )
    return _from_figures(out, req, facts)


def _from_figures(out: PlanRequest, req: PlanRequest, facts: Facts) -> PlanRequest:
    """The version, max_model_len and device memory from the log's version line and printed figures."""
    figures: Mapping[str, object] = facts.figures or {}
    version = out.vllm_version
    if req.vllm_version is None and facts.vllm_version:
        version = str(facts.vllm_version)
    v0_lines = "num_cpu_blocks" in figures or "peak_torch_gib" in figures  # "# CPU blocks", V0 profiling
    if req.vllm_version is None and not facts.vllm_version and (facts.engine == "v0" or v0_lines):
        version = "0.6"  # a V0 log without a version line: the last V0-default series
    length = out.max_model_len
    if length is None:
        printed = _figure(figures, "max_model_len") or _figure(figures, "max_concurrency_tokens")
        length = int(printed) if printed else None
    total = _figure(figures, "total_memory_gib") or _figure(figures, "node_total_gib")
    memory = float(total) if req.gpu_memory_gib is None and total else req.gpu_memory_gib
    if req.gpu == LOGGED_GPU and memory is None:
        raise UsageError("the log prints no device total memory", hint="pass --gpu NAME or --gpu-memory-gib N")
    layout_logged = (out.tp, out.pp, out.dp) != (req.tp, req.pp, req.dp)
    gpus = None if layout_logged else out.gpus
    return replace(out, vllm_version=version, max_model_len=length, gpu_memory_gib=memory, gpus=gpus)


def calibrate(req: PlanRequest, log_paths: list[str]) -> tuple[Calibration, Plan]:
    from oomkit.triage import analyse

    res = analyse(log_paths)
    facts = res.facts
    figures: Mapping[str, object] = facts.figures or {}
    if _figure(figures, "available_kv_cache_gib") is None and _figure(figures, "kv_cache_tokens") is None:
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
        printed = _figure(figures, name)
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


def _fit(p: Plan, figures: Mapping[str, object]) -> dict[str, float]:
    """The non-KV overhead that makes the predicted KV budget equal the printed one. Printed
    activation / CUDA-graph figures (the breakdown line) replace the estimates first."""
    printed_kv = _figure(figures, "available_kv_cache_gib")
    if printed_kv is None or p.budget.mode == "explicit":
        return {}
    if p.budget.mode == "cpu":
        non_kv = _figure(figures, "non_kv_gib")
        if non_kv is None:
            return {}
        # CPU: kv = requested - worker RSS, and RSS = weights + runtime (cpu_worker.py)
        return {"cpu_runtime_gib": round(max(0.0, float(non_kv) - p.budget.weights_bytes / GIB), 3)}
    out: dict[str, float] = {}
    activation, graphs = _figure(figures, "peak_activation_gib"), _figure(figures, "cuda_graph_gib")
    if activation is not None:
        out["activation_gib"] = float(activation)
    if graphs is not None and p.behaviour.cudagraphs_charged:
        out["cudagraph_gib"] = float(graphs)
    if out:
        p = plan(replace(p.request, assume={**p.request.assume, **out}))
    residual = p.budget.kv_bytes / GIB - float(printed_kv)  # > 0: the deployment uses more than predicted
    out["other_gib"] = round(max(0.0, p.assumptions["other_gib"].value + residual), 3)
    return out
