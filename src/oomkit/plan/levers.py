"""Levers: each re-plans with one change and reports the numbers it moves, or says why it does
not apply to this model, layout or version."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oomkit.errors import OomkitError

if TYPE_CHECKING:
    from oomkit.plan.core import Plan, PlanRequest


KV_ONLY = ("fp8 KV cache", "lower max_model_len", "DCP", "ReplaySSM")


def levers(p: Plan) -> list[dict[str, Any]]:
    out = [_fp8_kv(p), _shorter_context(p), _dcp(p), _gmu(p), _graphs(p), _ssm_bf16(p), _replayssm(p), _more_gpus(p)]
    if not p.fits_load:  # cannot load: levers that only reshape the KV pool cannot help
        out = [
            _no(x["lever"], x["flag"], "the model does not load on this layout; this lever only changes the KV pool")
            if x["lever"] in KV_ONLY and x["applies"]
            else x
            for x in out
        ]
    return out


def _summary(p: Plan) -> dict[str, Any]:
    c = p.capacity
    return {
        "kv_cache_tokens": c.kv_cache_tokens,
        "max_concurrency": round(c.max_concurrency, 2),
        "kv_cache_gib": p.per_gpu_gib()["kv_cache_gib"],
        "fits_load": p.fits_load,
        "fits_one_request": p.fits_load and c.fits_one_request,
        "fits_target": p.fits_target,
    }


def _try(p: Plan, name: str, flag: str, **changes: Any) -> dict[str, Any]:
    from oomkit.plan.core import plan

    req: PlanRequest = replace(p.request, **changes)
    try:
        after = plan(req, model=p.model if not req.hf_overrides else None, with_levers=False)
    except OomkitError as err:
        return {"lever": name, "applies": False, "flag": flag, "why": err.one_line()}
    return {"lever": name, "applies": True, "flag": flag, "before": _summary(p), "after": _summary(after)}


def _no(name: str, flag: str, why: str) -> dict[str, Any]:
    return {"lever": name, "applies": False, "flag": flag, "why": why}


def _fp8_kv(p: Plan) -> dict[str, Any]:
    flag = "--kv-cache-dtype fp8"
    if p.request.kv_cache_dtype.startswith("fp8"):
        return _no("fp8 KV cache", flag, "the KV cache is already fp8")
    if not (p.model.count("full") or p.model.count("sliding") or p.model.count("mla")):
        return _no("fp8 KV cache", flag, "the model has no attention KV; its state has its own dtype")
    out = _try(p, "fp8 KV cache", flag, kv_cache_dtype="fp8")
    if p.model.linear:
        out["why"] = (
            f"halves attention pages only; the {p.model.linear.kind.upper()} state keeps its own dtype "
            "(--mamba-ssm-cache-dtype) and the attention block is re-aligned to the state page"
        )
    return out


def _shorter_context(p: Plan) -> dict[str, Any]:
    mml = p.settings["max_model_len"]
    est = p.capacity.estimated_max_model_len
    target = est if (est and not p.capacity.fits_one_request) else mml // 2
    if target < 1:
        return _no("lower max_model_len", "--max-model-len N", "not even one token fits the KV pool")
    if p.request.context and target < p.request.context:
        target = p.request.context
    return _try(p, "lower max_model_len", f"--max-model-len {target}", max_model_len=target)


def _dcp(p: Plan) -> dict[str, Any]:
    flag = "--decode-context-parallel-size N"
    tp = p.layout.tp
    if p.model.count("sliding"):
        return _no("DCP", flag, "vLLM's DCP does not support sliding-window layers")
    if tp == 1:
        return _no("DCP", flag, "DCP shards KV inside the TP group and TP is 1")
    if p.layout.dcp >= tp:
        return _no("DCP", flag, f"DCP is already {p.layout.dcp} (= TP)")
    why = None
    if p.model.linear:
        why = "shards attention token positions only; the linear-attention state is not sharded"
    out = _try(p, "DCP", f"--decode-context-parallel-size {tp}", dcp=tp)
    if why:
        out["why"] = why
    return out


def _gmu(p: Plan) -> dict[str, Any]:
    flag = "--gpu-memory-utilization"
    if p.request.kv_cache_memory_bytes is not None:
        return _no("higher gpu_memory_utilization", flag, "--kv-cache-memory-bytes fixes the KV pool")
    gmu = p.settings["gpu_memory_utilization"]
    if gmu >= 0.97:
        return _no("higher gpu_memory_utilization", flag, f"already {gmu}")
    if p.gpu.platform == "cpu":
        return _no(
            "higher gpu_memory_utilization", flag, "on CPU it is a fraction of the NUMA node; raise it with care"
        )
    new = round(min(0.97, gmu + 0.05), 2)
    return _try(p, "higher gpu_memory_utilization", f"{flag} {new}", gpu_memory_utilization=new)


def _graphs(p: Plan) -> dict[str, Any]:
    flag = "--max-num-seqs / --compilation-config max_cudagraph_capture_size"
    if p.budget.cudagraph_bytes == 0:
        return _no("fewer CUDA-graph sizes", flag, "no CUDA graphs are captured here (CPU or --enforce-eager)")
    if not p.behaviour.cudagraphs_charged and not p.behaviour.extensible_kv:
        return _no(
            "fewer CUDA-graph sizes",
            flag,
            "this version captures graphs outside the budget; "
            "fewer sizes only protect the headroom above gpu_memory_utilization",
        )
    out = _try(p, "fewer CUDA-graph sizes", "--enforce-eager (upper bound of the saving)", enforce_eager=True)
    out["why"] = f"graphs are estimated at {p.per_gpu_gib()['cudagraph_gib']} GiB per GPU"
    return out


def _ssm_bf16(p: Plan) -> dict[str, Any]:
    flag = "--mamba-ssm-cache-dtype bfloat16"
    if not p.model.linear:
        return _no("bf16 state", flag, "the model has no linear-attention state")
    if p.kv.state_bytes_per_sequence == 0 or (p.request.mamba_ssm_cache_dtype or "auto") in ("bfloat16", "float16"):
        return _no("bf16 state", flag, "the state is already 16-bit")
    if not any(d.name == "mamba_ssm_cache_dtype" and d.value == "float32" for d in p.defaults):
        return _no("bf16 state", flag, "the state is not float32 here")
    out = _try(p, "bf16 state", flag, mamba_ssm_cache_dtype="bfloat16")
    out["why"] = (
        "halves the recurrent state; cost: the state is carried in bfloat16 across every token of a long "
        "context (check output quality on your longest prompts before relying on it)"
    )
    return out


def _replayssm(p: Plan) -> dict[str, Any]:
    flag = "--use-replayssm"
    if not p.model.linear:
        return _no("ReplaySSM", flag, "the model has no linear-attention state")
    if p.request.num_speculative_tokens == 0:
        return _no("ReplaySSM", flag, "without speculative decoding each request holds no per-draft state slots")
    if p.behaviour.version < (0, 34):
        return _no("ReplaySSM", flag, "--use-replayssm exists from vLLM 0.34")
    if p.request.use_replayssm:
        return _no("ReplaySSM", flag, "already on")
    return _try(p, "ReplaySSM", flag, use_replayssm=True)


def _more_gpus(p: Plan) -> dict[str, Any]:
    lay = p.layout
    domain = p.gpu.nvlink_domain
    if lay.tp * 2 <= domain:
        return _try(
            p, "more GPUs", f"--tensor-parallel-size {lay.tp * 2}", tp=lay.tp * 2, gpus=None, pp=lay.pp, dp=lay.dp
        )
    return _try(
        p, "more GPUs", f"--pipeline-parallel-size {lay.pp * 2}", pp=lay.pp * 2, gpus=None, tp=lay.tp, dp=lay.dp
    )
