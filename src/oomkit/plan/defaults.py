"""The defaults a plan's figures rest on, each with why vLLM picks it here (platform, model,
version, flag), the flag that pins it, and the vLLM function it follows. A user who reads
"6,112,324 tokens" can see which choices that figure assumes and change any of them."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.plan.kv import KvLayout
from oomkit.plan.model import ModelShape
from oomkit.plan.settings import Settings
from oomkit.plan.state import StateConfig, host_has_amx, host_has_avx512_bf16
from oomkit.plan.versions import Behaviour, PlatformFacts
from oomkit.serial import JsonObject, to_json_object


@dataclass(frozen=True)
class Default:
    name: str
    value: str | int | float | bool
    why: str
    pin: str  # the flag that fixes it
    source: str  # the vLLM code that decides it

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass(frozen=True)
class Context:
    """What the defaults depend on, gathered once by plan()."""

    model: ModelShape
    platform: PlatformFacts
    behaviour: Behaviour
    settings: Settings
    state: StateConfig
    kv: KvLayout
    requested_block: int | None
    base_block: int  # the block before hybrid page alignment
    requested_ssm_dtype: str | None
    requested_prefix: bool | None
    requested_mnbt: int | None
    on_cuda: bool


def defaults(ctx: Context) -> tuple[Default, ...]:
    out = [_block(ctx), _prefix(ctx), _batched(ctx), _async(ctx)]
    if ctx.model.linear is not None:
        out += [_ssm_dtype(ctx), _mamba_mode(ctx)]
    return tuple(out)


def _block(ctx: Context) -> Default:
    block, m, pf = ctx.kv.block_size, ctx.model, ctx.platform
    if m.mla and pf.name == "cpu" and not host_has_amx():
        why = "CPU without AMX tiles: the reference MLA decode kernel compiles only for block 16"
    elif ctx.requested_block:
        why = "--block-size"
    elif m.mla and pf.name == "cpu":
        why = "CPU with AMX tiles: the AMX MLA backend keeps the default block"
    elif m.mla and pf.mla_block_size:
        why = f"the {pf.name} MLA backend's block"
    else:
        why = f"the {pf.name} attention backend's default block"
    if block > ctx.base_block:
        why += f"; raised from {ctx.base_block} so one attention page holds one state page (hybrid page alignment)"
    return Default(
        "block_size",
        block,
        why,
        "--block-size",
        "vllm/platforms/*.py check_and_update_config; vllm/model_executor/models/config.py "
        "HybridAttentionMambaModelConfig.verify_and_update_config",
    )


def _prefix(ctx: Context) -> Default:
    on = bool(ctx.settings["enable_prefix_caching"])
    if ctx.requested_prefix is not None:
        why = "--enable-prefix-caching / --no-enable-prefix-caching"
    elif ctx.model.mla and ctx.platform.name == "cpu" and not host_has_amx():
        why = "forced off: MLA on a non-GPU platform without AMX ('forcing ... prefix caching to be disabled')"
    elif on:
        why = "on by default since vLLM 0.13 (V1)"
    else:
        why = "off by default before vLLM 0.13"
    return Default(
        "enable_prefix_caching",
        on,
        why,
        "--enable-prefix-caching / --no-enable-prefix-caching",
        "vllm/config/cache.py CacheConfig; vllm/platforms/cpu.py check_and_update_config",
    )


def _batched(ctx: Context) -> Default:
    value = int(ctx.settings["max_num_batched_tokens"])
    if ctx.requested_mnbt:
        why = "--max-num-batched-tokens"
    elif ctx.behaviour.engine == "v0":
        why = "V0 without chunked prefill: max(max_model_len, 2048)"
    else:
        why = "the usage-context default for this platform and device size, capped at max_num_seqs x max_model_len"
    return Default(
        "max_num_batched_tokens",
        value,
        why + "; sets the profile batch (activation peak) and, with async scheduling, sliding-window blocks",
        "--max-num-batched-tokens",
        "vllm/engine/arg_utils.py EngineArgs._set_default_max_num_seqs_and_batched_tokens_args",
    )


def _async(ctx: Context) -> Default:
    on = ctx.on_cuda and ctx.behaviour.version >= (0, 13)
    in_flight = int(ctx.settings["in_flight_tokens"])
    why = "on by default on CUDA since vLLM 0.13" if on else "off: not a CUDA platform or before vLLM 0.13"
    if ctx.behaviour.sliding_in_flight_batches:
        why += f"; a sliding-window request holds window + {in_flight:,} in-flight tokens of blocks"
    return Default(
        "async_scheduling",
        on,
        why,
        "--async-scheduling / --no-async-scheduling",
        "vllm/config/scheduler.py SchedulerConfig.async_scheduling; vllm/v1/core/single_type_kv_cache_manager.py",
    )


def _ssm_dtype(ctx: Context) -> Default:
    m, la = ctx.model, ctx.model.linear
    assert la is not None
    value = "float32" if ctx.state.ssm_bytes == 4 else ("bfloat16" if ctx.state.ssm_bytes == 2 else "float16")
    if ctx.requested_ssm_dtype and ctx.requested_ssm_dtype != "auto":
        why = "--mamba-ssm-cache-dtype"
    elif la.kind == "kda":
        why = "KDA keeps its recurrent state in float32 (kda_state_dtype)"
    elif la.kind == "gdn" and ctx.platform.forces_ssm_fp32 and host_has_avx512_bf16():
        why = "vLLM's CPU backend resets the GDN state to float32 where the CPU has AVX-512 BF16"
    elif m.ssm_dtype_hint:
        why = f"the model config asks for {m.ssm_dtype_hint}"
    elif la.kind == "mamba2":
        why = "Mamba2 state defaults to float32"
    else:
        why = "follows the model dtype"
    return Default(
        "mamba_ssm_cache_dtype",
        value,
        why + f" ({ctx.state.ssm_bytes} B per state element)",
        "--mamba-ssm-cache-dtype",
        "vllm/model_executor/layers/mamba/mamba_utils.py MambaStateDtypeCalculator; vllm/platforms/cpu.py",
    )


def _mamba_mode(ctx: Context) -> Default:
    mode = ctx.state.mode
    if mode == "none":
        why = "prefix caching is off: one state per sequence"
    elif mode == "align":
        why = "prefix caching on: states kept at block boundaries (one state block per sequence, plus speculative)"
    else:
        why = "prefix caching on (0.17-0.30): one state per mamba block of every sequence"
    return Default(
        "mamba_cache_mode",
        mode,
        why,
        "--mamba-cache-mode",
        "vllm/config/cache.py CacheConfig.mamba_cache_mode",
    )


def defaults_text(items: tuple[Default, ...]) -> list[str]:
    return [f"  {d.name} = {d.value}: {d.why} (pin: {d.pin})" for d in items]
