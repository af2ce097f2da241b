"""Linear-attention state (KDA, gated delta net, mamba2): bytes per sequence per layer on one TP
rank, the slots a request holds, and the hybrid block-size alignment.

Shapes: MambaStateShapeCalculator in vllm/model_executor/layers/mamba/mamba_utils.py (0.32).
Slots: MambaSpec.max_memory_usage_bytes in vllm/v1/kv_cache_interface.py. Alignment:
Platform._align_hybrid_block_size in vllm/platforms/interface.py."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.plan.model import ModelShape
from oomkit.units import cdiv

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


@dataclass(frozen=True)
class StateConfig:
    conv_bytes: int  # --mamba-cache-dtype (auto = model dtype)
    ssm_bytes: int  # --mamba-ssm-cache-dtype (per model default, see ssm_dtype)
    num_spec_tokens: int  # extra conv rows, and one state slot per draft token
    mode: str  # none | align | all  (mamba_cache_mode)
    use_replayssm: bool = False
    prefill_checkpoint_blocks: int = 0
    mamba_blocks_all_mode: int = 0  # mode "all" (0.17-0.30): one state per mamba block

    @property
    def spec_blocks(self) -> int:
        # ReplaySSM verifies the whole draft window off one checkpoint (mamba/abstract.py).
        return 0 if self.use_replayssm else self.num_spec_tokens

    @property
    def slots_per_request(self) -> int:
        if self.mode == "align":
            return 2 + self.spec_blocks + self.prefill_checkpoint_blocks
        if self.mode == "all":
            return self.mamba_blocks_all_mode + self.spec_blocks
        return 1 + self.spec_blocks


def host_has_avx512_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """vLLM-CPU's accelerated GDN path (and its float32 reset) needs AVX-512 BF16 (platforms/cpu.py)."""
    return _cpu_flag(" avx512_bf16", cpuinfo)


def host_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """vLLM-CPU runs MLA on its AMX backend where the CPU has AMX tiles (platforms/cpu.py
    get_attn_backend_cls, torch.cpu._is_amx_tile_supported): no block-16 override, default block
    128, and prefix caching and chunked prefill stay on."""
    return _cpu_flag(" amx_tile", cpuinfo)


def _cpu_flag(flag: str, cpuinfo: str) -> bool:
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            return any(line.startswith("flags") and flag in line for line in fh)
    except OSError:
        return False


def ssm_dtype(m: ModelShape, override: str | None, platform_forces_fp32: bool) -> str:
    """Recurrent-state dtype: KDA float32 by default (kda_state_dtype); Nemotron-H float32 unless
    its config says otherwise (NemotronHForCausalLMConfig); Qwen3.5 from mamba_ssm_dtype; others
    follow the model dtype. vLLM-CPU resets GDN to float32 (platforms/cpu.py)."""
    if override and override != "auto":
        return override
    kind = m.linear.kind if m.linear else ""
    if kind == "kda":
        return "float32"
    if platform_forces_fp32 and kind == "gdn":
        return "float32"
    if m.ssm_dtype_hint:
        return str(m.ssm_dtype_hint)
    if kind == "mamba2":
        return "float32"
    return m.dtype


def state_bytes(m: ModelShape, tp: int, cfg: StateConfig) -> int:
    """One sequence's state in one linear-attention layer on one rank (unpadded)."""
    la = m.linear
    assert la is not None
    rows = la.conv_kernel - 1 + cfg.num_spec_tokens
    if la.kind == "kda":
        proj = la.num_heads * la.head_dim
        conv = (proj + 2 * proj) // tp * rows
        recurrent = la.num_heads // tp * la.head_dim * la.head_dim
    elif la.kind == "gdn":
        conv = (2 * la.num_k_heads * la.head_k_dim + la.num_heads * la.head_dim) // tp * rows
        recurrent = la.num_heads // tp * la.head_dim * la.head_k_dim
    else:  # mamba2; groups are padded so every TP rank owns whole groups
        groups = la.n_groups + (0 if la.n_groups % tp == 0 else tp - la.n_groups)
        conv = (la.num_heads * la.head_dim + 2 * groups * la.state_size) // tp * rows
        recurrent = la.num_heads // tp * la.head_dim * la.state_size
    return conv * cfg.conv_bytes + recurrent * cfg.ssm_bytes


def hybrid_block_size(
    attn_page_1tok: int, state_page: int, block_size: int, kernel_block: int, mla_align_min: int
) -> int:
    """Smallest attention block whose page holds one state page; may exceed --block-size."""
    align = max(kernel_block, block_size)
    if mla_align_min:
        align = max(align, mla_align_min)
    attn_block = align * cdiv(state_page, align * attn_page_1tok)
    attn_block = kernel_block * cdiv(attn_block, kernel_block)
    return max(block_size, attn_block)
