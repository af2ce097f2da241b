"""Levers: each re-plans with one change and reports the numbers it moves, or says why it does
not apply to this model, layout or version."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from oomkit.errors import OomkitError
from oomkit.plan.core import Plan, PlanRequest, plan
from oomkit.plan.model import ModelShape
from oomkit.serial import JsonObject, to_json_object

KV_ONLY = ("fp8_kv", "shorter_context", "dcp", "replayssm")


@dataclass(frozen=True)
class Summary:
    """The figures a lever moves."""

    kv_cache_tokens: int
    max_concurrency: float
    kv_cache_gib: float
    fits_load: bool
    fits_one_request: bool
    fits_target: bool | None

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass(frozen=True)
class Lever:
    """One change re-planned: its figures before and after, or why it does not apply."""

    id: str
    lever: str  # the name people read
    applies: bool
    flag: str
    why: str | None = None
    before: Summary | None = None
    after: Summary | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"id": self.id, "lever": self.lever, "applies": self.applies, "flag": self.flag}
        if self.before is not None and self.after is not None:
            out.update(before=self.before.to_dict(), after=self.after.to_dict())
        if self.why is not None:
            out["why"] = self.why
        return out


def with_levers(p: Plan) -> Plan:
    """The plan with its levers: each lever is another plan, computed here by the caller's choice."""
    return replace(p, levers=tuple(levers(p)))


def plan_with_levers(req: PlanRequest, model: ModelShape | None = None) -> Plan:
    return with_levers(plan(req, model=model))


def levers(p: Plan) -> list[Lever]:
    out = [_fp8_kv(p), _shorter_context(p), _dcp(p), _gmu(p), _graphs(p), _ssm_bf16(p), _replayssm(p), _more_gpus(p)]
    if not p.fits_load:  # cannot load: levers that only reshape the KV pool cannot help
        why = "the model does not load on this layout; this lever only changes the KV pool"
        out = [_no(x.id, x.lever, x.flag, why) if x.id in KV_ONLY and x.applies else x for x in out]
    return out


def _summary(p: Plan) -> Summary:
    c = p.capacity
    return Summary(
        kv_cache_tokens=c.kv_cache_tokens,
        max_concurrency=round(c.max_concurrency, 2),
        kv_cache_gib=p.per_gpu_gib()["kv_cache_gib"],
        fits_load=p.fits_load,
        fits_one_request=p.fits_load and c.fits_one_request,
        fits_target=p.fits_target,
    )


def _try(p: Plan, lever_id: str, name: str, flag: str, why: str | None = None, **changes: Any) -> Lever:
    req: PlanRequest = replace(p.request, **changes)
    try:
        after = plan(req, model=p.model if not req.hf_overrides else None)
    except OomkitError as err:
        return _no(lever_id, name, flag, err.one_line())
    return Lever(lever_id, name, True, flag, why, _summary(p), _summary(after))


def _no(lever_id: str, name: str, flag: str, why: str) -> Lever:
    return Lever(lever_id, name, False, flag, why)


def _fp8_kv(p: Plan) -> Lever:
    lid, name, flag = "fp8_kv", "fp8 KV cache", "--kv-cache-dtype fp8"
    if p.request.kv_cache_dtype.startswith("fp8"):
        return _no(lid, name, flag, "the KV cache is already fp8")
    if not (p.model.count("full") or p.model.count("sliding") or p.model.count("mla")):
        return _no(lid, name, flag, "the model has no attention KV; its state has its own dtype")
    why = None
    if p.model.linear:
        why = (
            f"halves attention pages only; the {p.model.linear.kind.upper()} state keeps its own dtype "
            "(--mamba-ssm-cache-dtype) and the attention block is re-aligned to the state page"
        )
    return _try(p, lid, name, flag, why, kv_cache_dtype="fp8")


def _shorter_context(p: Plan) -> Lever:
    lid, name = "shorter_context", "lower max_model_len"
    mml = p.settings["max_model_len"]
    est = p.capacity.estimated_max_model_len
    target = est if (est and not p.capacity.fits_one_request) else mml // 2
    if target < 1:
        return _no(lid, name, "--max-model-len N", "not even one token fits the KV pool")
    if p.request.context and target < p.request.context:
        target = p.request.context
    return _try(p, lid, name, f"--max-model-len {target}", max_model_len=target)


def _dcp(p: Plan) -> Lever:
    lid, name, flag = "dcp", "DCP", "--decode-context-parallel-size N"
    tp = p.layout.tp
    if p.model.count("sliding"):
        return _no(lid, name, flag, "vLLM's DCP does not support sliding-window layers")
    if tp == 1:
        return _no(lid, name, flag, "DCP shards KV inside the TP group and TP is 1")
    if p.layout.dcp >= tp:
        return _no(lid, name, flag, f"DCP is already {p.layout.dcp} (= TP)")
    why = "shards attention token positions only; the linear-attention state is not sharded" if p.model.linear else None
    return _try(p, lid, name, f"--decode-context-parallel-size {tp}", why, dcp=tp)


def _gmu(p: Plan) -> Lever:
    lid, name, flag = "gmu", "higher gpu_memory_utilization", "--gpu-memory-utilization"
    if p.request.kv_cache_memory_bytes is not None:
        return _no(lid, name, flag, "--kv-cache-memory-bytes fixes the KV pool")
    gmu = p.settings["gpu_memory_utilization"]
    if gmu >= 0.97:
        return _no(lid, name, flag, f"already {gmu}")
    if p.gpu.platform == "cpu":
        return _no(lid, name, flag, "on CPU it is a fraction of the NUMA node; raise it with care")
    new = round(min(0.97, gmu + 0.05), 2)
    return _try(p, lid, name, f"{flag} {new}", gpu_memory_utilization=new)


def _graphs(p: Plan) -> Lever:
    lid, name = "graphs", "fewer CUDA-graph sizes"
    flag = "--max-num-seqs / --compilation-config max_cudagraph_capture_size"
    if p.budget.cudagraph_bytes == 0:
        return _no(lid, name, flag, "no CUDA graphs are captured here (CPU or --enforce-eager)")
    if not p.behaviour.cudagraphs_charged and not p.behaviour.extensible_kv:
        why = (
            "this version captures graphs outside the budget; "
            "fewer sizes only protect the headroom above gpu_memory_utilization"
        )
        return _no(lid, name, flag, why)
    why = f"graphs are estimated at {p.per_gpu_gib()['cudagraph_gib']} GiB per GPU"
    return _try(p, lid, name, "--enforce-eager (upper bound of the saving)", why, enforce_eager=True)


def _ssm_bf16(p: Plan) -> Lever:
    lid, name, flag = "ssm_bf16", "bf16 state", "--mamba-ssm-cache-dtype bfloat16"
    if not p.model.linear:
        return _no(lid, name, flag, "the model has no linear-attention state")
    if p.kv.state_bytes_per_sequence == 0 or (p.request.mamba_ssm_cache_dtype or "auto") in ("bfloat16", "float16"):
        return _no(lid, name, flag, "the state is already 16-bit")
    if not any(d.name == "mamba_ssm_cache_dtype" and d.value == "float32" for d in p.defaults):
        return _no(lid, name, flag, "the state is not float32 here")
    why = (
        "halves the recurrent state; cost: the state is carried in bfloat16 across every token of a long "
        "context (check output quality on your longest prompts before relying on it)"
    )
    return _try(p, lid, name, flag, why, mamba_ssm_cache_dtype="bfloat16")


def _replayssm(p: Plan) -> Lever:
    lid, name, flag = "replayssm", "ReplaySSM", "--use-replayssm"
    if not p.model.linear:
        return _no(lid, name, flag, "the model has no linear-attention state")
    if p.request.num_speculative_tokens == 0:
        return _no(lid, name, flag, "without speculative decoding each request holds no per-draft state slots")
    if p.behaviour.version < (0, 34):
        return _no(lid, name, flag, "--use-replayssm exists from vLLM 0.34")
    if p.request.use_replayssm:
        return _no(lid, name, flag, "already on")
    return _try(p, lid, name, flag, use_replayssm=True)


def _more_gpus(p: Plan) -> Lever:
    """Double TP inside the NVLink domain, else double PP across domains."""
    lay = p.layout
    tp, pp = (lay.tp * 2, lay.pp) if lay.tp * 2 <= p.gpu.nvlink_domain else (lay.tp, lay.pp * 2)
    flag = f"--tensor-parallel-size {tp}" if tp != lay.tp else f"--pipeline-parallel-size {pp}"
    return _try(p, "more_gpus", "more GPUs", flag, tp=tp, pp=pp, gpus=None, dp=lay.dp)
