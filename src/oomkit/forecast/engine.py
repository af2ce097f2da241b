"""vLLM's own v1 Scheduler and KV-cache manager, built from a plan with no model and no GPU, the
way vLLM's tests/v1/core/utils.py builds one: real SchedulerConfig / ModelConfig / CacheConfig, and
a KVCacheConfig made by hand, here from the planner's KV groups and block count. What the engine
core does between the KV configuration and the scheduler (the global block size, the hash block
size, the cache-hit alignment) is done by calling the same vLLM functions (v1/engine/core.py,
EngineCore._initialize_kv_caches)."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomkit.errors import InputError
from oomkit.forecast.tokens import OUTPUT_TOKEN_ID
from oomkit.forecast.vllm_api import Vllm, guarded, load_vllm
from oomkit.plan import Plan
from oomkit.plan.kv import Group, Spec
from oomkit.plan.versions import PLATFORMS
from oomkit.serial import JsonObject, to_json_object

DUMMY_VOCAB = 1 << 17
"""Vocabulary of the stand-in model config: above every token id the forecast makes (< 2**16 + 64)."""
KDA_CHECKPOINT_ALIGNMENT = 16
"""FlashKDA exports prefill checkpoints every 16 tokens (layers/mamba/kda_checkpoint.py, 0.32);
mamba2 exports at any position (mamba_mixer2.py: alignment 1)."""
VLLM_DEFAULT_RETENTION = 0
"""CacheConfig.prefix_cache_retention_interval when a server is not given one (vllm/config/cache.py,
0.32): sliding-window and mamba groups keep only their semantic prefix-cache checkpoints. None keeps
them densely; N also every N tokens."""


@dataclass(frozen=True)
class EngineSettings:
    """The scheduler settings a forecast runs with, all taken from the plan."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_caching: bool
    num_blocks: int
    mamba_cache_mode: str  # none | align
    in_flight_tokens: int  # max_concurrent_batches x max_num_batched_tokens, as the plan assumed
    prefix_cache_retention_interval: int | None  # the server's --prefix-cache-retention-interval

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass
class Engine:
    """One live vLLM scheduler and what it was built with."""

    api: Vllm
    scheduler: Any
    settings: EngineSettings
    block_hasher: Callable[[Any], list[Any]] | None
    scheduler_block_size: int
    hash_block_size: int
    vllm_kv_cache_tokens: int
    group_kinds: tuple[str, ...]

    @property
    def scheduler_class(self) -> str:
        cls = type(self.scheduler)
        return f"{cls.__module__}.{cls.__qualname__}"


def settings_of(p: Plan, retention: int | None = VLLM_DEFAULT_RETENTION) -> EngineSettings:
    s = p.settings
    hybrid = any(g.specs[0].kind == "mamba" for g in p.kv.groups)
    prefix = bool(s["enable_prefix_caching"])
    return EngineSettings(
        max_model_len=int(s["max_model_len"]),
        max_num_seqs=int(s["max_num_seqs"]),
        max_num_batched_tokens=int(s["max_num_batched_tokens"]),
        enable_prefix_caching=prefix,
        num_blocks=int(p.capacity.num_blocks),
        mamba_cache_mode="align" if hybrid and prefix else "none",
        in_flight_tokens=int(s["in_flight_tokens"]),
        prefix_cache_retention_interval=retention,
    )


def build_engine(p: Plan, retention: int | None = VLLM_DEFAULT_RETENTION) -> Engine:
    """vLLM's Scheduler for this plan's KV pool (one engine: one DP rank); `retention` is the
    server's prefix-cache retention interval (VLLM_DEFAULT_RETENTION when it sets none)."""
    api = load_vllm()
    st = settings_of(p, retention)
    if st.num_blocks < 2:
        raise InputError(f"the plan has a KV pool of {st.num_blocks} blocks: vLLM would not start")
    logging.getLogger("vllm").setLevel(logging.ERROR)  # its config warnings are about this CPU, not the target
    vc = guarded(api, "building VllmConfig", _vllm_config, api, st, p)
    kvc = guarded(api, "building KVCacheConfig", _kv_cache_config, api, p, st, vc)
    sched_block, hash_block = guarded(api, "resolving block sizes", _resolve_blocks, api, vc, kvc)
    scheduler = guarded(
        api,
        "building Scheduler",
        api.scheduler.Scheduler,
        vllm_config=vc,
        kv_cache_config=kvc,
        structured_output_manager=api.structured.StructuredOutputManager(vc),
        block_size=sched_block,
        hash_block_size=hash_block,
        log_stats=True,
    )
    _after_handshake(vc, p)
    hasher = _block_hasher(api, vc, hash_block) if st.enable_prefix_caching else None
    tokens, _conc = api.utils.get_kv_cache_capacity(vc, kvc)
    kinds = tuple(_kind(g) for g in p.kv.groups)
    return Engine(api, scheduler, st, hasher, sched_block, hash_block, int(tokens), kinds)


def runner_output(engine: Engine, scheduler: Any, ids: list[str]) -> Any:
    """The synthetic executor's ModelRunnerOutput for a step that scheduled `ids`: one token for each
    request whose prompt is computed, nothing for a prefill chunk that has not reached its end."""
    requests = scheduler.requests

    def sampled(req_id: str) -> list[int]:
        r = requests.get(req_id)
        return [OUTPUT_TOKEN_ID] if r is not None and r.num_computed_tokens >= r.num_tokens else []

    return engine.api.outputs.ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: n for n, r in enumerate(ids)}, sampled_token_ids=[sampled(i) for i in ids]
    )


def _after_handshake(vc: Any, p: Plan) -> None:
    """What the engine core changes once its scheduler holds the cache config: vLLM 0.32's
    EngineCoreProc re-runs VllmConfig.__post_init__ after its start-up handshake (v1/engine/core.py,
    _perform_handshakes), whose platform hook on CPU sets cache_config.block_size back to 128 unless
    the user gave one (platforms/cpu.py check_and_update_config). The KV blocks keep their size; what
    reads it is the scheduler's align-mode prefill split (_mamba_block_aligned_split), so a CPU hybrid
    with 256-token blocks ends its prefill chunks at 128-token boundaries (seen on the testbed with a
    scheduler probe: block_size 256 when the scheduler is built, 128 while it serves). CUDA's hook keeps
    the resolved size. MLA on CPU keeps its forced block (16 without AMX), not reproduced here."""
    cpu = PLATFORMS["cpu"]
    if p.gpu.platform == cpu.name and not p.request.block_size and not p.model.mla and cpu.default_block_size:
        vc.cache_config.block_size = cpu.default_block_size


def _vllm_config(api: Vllm, st: EngineSettings, p: Plan) -> Any:
    cfg = api.config
    with tempfile.TemporaryDirectory(prefix="oomkit-forecast-") as tmp:
        model_dir = _stand_in_model(Path(tmp), st.max_model_len)
        # The scheduler reads only max_model_len and the model's kind (decoder, text-only) from
        # ModelConfig, so a two-layer stand-in config gives it what the real model would.
        model = cfg.ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=st.max_model_len)
        sched = cfg.SchedulerConfig(
            max_num_seqs=st.max_num_seqs,
            max_num_batched_tokens=st.max_num_batched_tokens,
            max_model_len=st.max_model_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
        )
        cache = cfg.CacheConfig(
            block_size=p.kv.block_size,
            enable_prefix_caching=st.enable_prefix_caching,
            prefix_cache_retention_interval=st.prefix_cache_retention_interval,
        )
        vc = cfg.VllmConfig(scheduler_config=sched, model_config=model, cache_config=cache)
    # VllmConfig adjusted these for the CPU this runs on; the forecast is for the plan's target.
    vc.scheduler_config.max_num_seqs = st.max_num_seqs
    vc.scheduler_config.max_num_batched_tokens = st.max_num_batched_tokens
    vc.scheduler_config.enable_chunked_prefill = True
    # The Scheduler class stays the synchronous one (docs/forecast.md); the flag only sizes what the
    # KV manager reserves for batches in flight (VllmConfig.max_in_flight_tokens), as the plan did.
    vc.scheduler_config.async_scheduling = st.in_flight_tokens >= 2 * st.max_num_batched_tokens
    vc.cache_config.enable_prefix_caching = st.enable_prefix_caching
    vc.cache_config.mamba_cache_mode = st.mamba_cache_mode
    return vc


def _stand_in_model(where: Path, max_model_len: int) -> Path:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": DUMMY_VOCAB,
        "max_position_embeddings": max_model_len,
        "torch_dtype": "bfloat16",
        "rms_norm_eps": 1e-5,
    }
    (where / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return where


def _kv_cache_config(api: Vllm, p: Plan, st: EngineSettings, vc: Any) -> Any:
    groups = [api.interface.KVCacheGroupSpec(list(g.layers), _group_spec(api, p, g, st)) for g in p.kv.groups]
    # The retention policy travels in the KVCacheConfig, as get_kv_cache_config_from_groups puts it
    # there from the CacheConfig: the dataclass's own default (None: dense mamba/sliding checkpoints)
    # is not what a server runs with, and it changes which prefixes hit.
    worker = api.interface.KVCacheConfig(
        num_blocks=st.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=groups,
        prefix_cache_retention_interval=vc.cache_config.prefix_cache_retention_interval,
    )
    # What the engine core hands its scheduler: one spec per group (generate_scheduler_kv_cache_config).
    return api.utils.generate_scheduler_kv_cache_config([worker])


def _group_spec(api: Vllm, p: Plan, g: Group, st: EngineSettings) -> Any:
    specs = {name: _layer_spec(api, p, s, st) for name, s in zip(g.layers, g.specs, strict=True)}
    first = next(iter(specs.values()))
    if all(s == first for s in specs.values()):
        return first
    return api.interface.UniformTypeKVCacheSpecs(block_size=first.block_size, kv_cache_specs=specs)


def _layer_spec(api: Vllm, p: Plan, s: Spec, st: EngineSettings) -> Any:
    """One planner layer spec as vLLM's KVCacheSpec. Page sizes are the planner's (the scheduler
    never reads them; vLLM's capacity line does, and is reported next to the plan's)."""
    import torch

    iface = api.interface
    if s.kind == "mamba":
        return _mamba_spec(api, p, s, st)
    per_token = s.page_bytes // s.block_size
    common = {"block_size": s.block_size, "num_kv_heads": 1, "head_size": per_token, "dtype": torch.int8}
    if s.kind == "mla":
        return iface.MLAAttentionSpec(**common)
    if s.kind == "sliding":
        return iface.SlidingWindowSpec(**common, sliding_window=s.window, state_content_bytes=per_token)
    return iface.FullAttentionSpec(**common, state_content_bytes=per_token)


def _mamba_spec(api: Vllm, p: Plan, s: Spec, st: EngineSettings) -> Any:
    import torch

    linear = p.model.linear
    align = st.mamba_cache_mode == "align"
    spec_blocks = 0 if p.request.use_replayssm else int(p.settings["num_speculative_tokens"])
    base = 2 if align else 1
    checkpoint = max(0, s.mamba_blocks - base - spec_blocks) if align else 0
    alignment = None
    if checkpoint and linear is not None:
        alignment = KDA_CHECKPOINT_ALIGNMENT if linear.kind == "kda" else 1
    return api.interface.MambaSpec(
        block_size=s.block_size,
        shapes=((s.page_bytes,),),
        dtypes=(torch.int8,),
        mamba_cache_mode="align" if align else "none",
        num_speculative_blocks=spec_blocks,
        num_prefill_checkpoint_blocks=checkpoint,
        prefill_checkpoint_alignment=alignment,
    )


def _resolve_blocks(api: Vllm, vc: Any, kvc: Any) -> tuple[int, int]:
    """EngineCore._initialize_kv_caches after get_kv_cache_configs: the global block size is the
    smallest prefix-cacheable group block; then vLLM resolves the scheduler and hash block sizes."""
    groups = kvc.kv_cache_groups
    cacheable = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
    vc.cache_config.block_size = min(cacheable or [g.kv_cache_spec.block_size for g in groups])
    vc.cache_config.num_gpu_blocks = kvc.num_blocks
    sched_block, hash_block = api.utils.resolve_kv_cache_block_sizes(kvc, vc)
    kvc.hash_block_size = hash_block
    kvc.cache_hit_alignment_tokens = api.utils.resolve_cache_hit_alignment_tokens(kvc, vc, sched_block, hash_block)
    return int(sched_block), int(hash_block)


def _block_hasher(api: Vllm, vc: Any, hash_block: int) -> Callable[[Any], list[Any]]:
    # The engine core's hasher (EngineCore.__init__): the configured algorithm, chained from NONE_HASH.
    fn = api.hashing.get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    api.utils.init_none_hash(fn)
    hasher: Callable[[Any], list[Any]] = api.utils.get_request_block_hasher(hash_block, fn)
    return hasher


def _kind(g: Group) -> str:
    s = g.specs[0]
    if s.kind == "sliding":
        return f"sliding window {s.window} ({len(g.layers)} layers, block {s.block_size})"
    name = {"full": "full attention", "mla": "MLA", "mamba": "linear-attention state"}[s.kind]
    return f"{name} ({len(g.layers)} layers, block {s.block_size})"
