"""The vLLM settings a plan runs with: the request's flags, with vLLM's defaults filled in for the
version, platform and device. A TypedDict because the plan's JSON prints it as is (`settings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from oomkit.errors import UsageError
from oomkit.plan import state
from oomkit.plan.versions import Behaviour, batch_defaults

if TYPE_CHECKING:
    from oomkit.plan.catalog import Gpu
    from oomkit.plan.core import PlanRequest
    from oomkit.plan.layouts import Layout
    from oomkit.plan.model import ModelShape


class Settings(TypedDict):
    max_model_len: int
    auto_fit: bool  # --max-model-len auto: vLLM lowers it to what fits the KV pool
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    enable_prefix_caching: bool
    in_flight_tokens: int  # max_concurrent_batches x max_num_batched_tokens
    num_speculative_tokens: int
    enforce_eager: bool
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None


def resolve_settings(
    req: PlanRequest, m: ModelShape, gpu: Gpu, b: Behaviour, layout: Layout, cap_gib: float
) -> Settings:
    auto_fit = req.max_model_len == -1  # vLLM's --max-model-len -1 / auto
    mml = _max_model_len(req, m, auto_fit)
    world = layout.tp * layout.pp
    if b.version >= (0, 9):
        mnbt_d, mns_d = batch_defaults(gpu.platform, cap_gib, gpu.name, world)
    else:
        mnbt_d, mns_d = 2048, 256
    mns = req.max_num_seqs or mns_d
    if b.engine == "v0":  # no chunked prefill: the profile batch is a whole max-length prompt
        mnbt = req.max_num_batched_tokens or max(mml, 2048)
    else:
        mnbt = req.max_num_batched_tokens or min(mns * mml, mnbt_d)
    if not req.max_num_seqs:
        mns = min(mns, mnbt)
    gmu = req.gpu_memory_utilization if req.gpu_memory_utilization is not None else b.default_gmu
    if not 0 < gmu <= 1:
        raise UsageError("--gpu-memory-utilization must be in (0, 1]")
    batches = layout.pp
    if gpu.platform == "cuda" and b.version >= (0, 13):  # async scheduling on by default
        batches = layout.pp + 1 if b.version >= (0, 34) else (2 if layout.pp == 1 else layout.pp)
    # VllmConfig.max_in_flight_tokens (0.26+): every concurrent batch may hold a full token budget
    in_flight = batches * mnbt if b.sliding_in_flight_batches else mnbt
    prefix = req.enable_prefix_caching if req.enable_prefix_caching is not None else b.version >= (0, 13)
    if gpu.platform == "cpu" and m.mla and not state.host_has_amx():  # read through the module: tests pin the host
        prefix = False  # "MLA is enabled on a non-GPU platform; forcing ... prefix caching to be disabled"
    return Settings(
        max_model_len=int(mml),
        auto_fit=auto_fit,
        max_num_seqs=int(mns),
        max_num_batched_tokens=int(mnbt),
        gpu_memory_utilization=gmu,
        kv_cache_dtype=req.kv_cache_dtype,
        enable_prefix_caching=prefix,
        in_flight_tokens=int(in_flight),
        num_speculative_tokens=req.num_speculative_tokens,
        enforce_eager=req.enforce_eager,
        kv_cache_memory_bytes=req.kv_cache_memory_bytes,
        num_gpu_blocks_override=req.num_gpu_blocks_override,
    )


def _max_model_len(req: PlanRequest, m: ModelShape, auto_fit: bool) -> int:
    mml = m.max_position_embeddings if auto_fit or not req.max_model_len else req.max_model_len
    if not mml:
        raise UsageError(f"{m.name}: config has no max_position_embeddings", hint="pass --max-model-len N")
    if m.max_position_embeddings and mml > m.max_position_embeddings:
        raise UsageError(
            f"--max-model-len {mml} is above the model's max_position_embeddings "
            f"{m.max_position_embeddings} (vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    return mml
