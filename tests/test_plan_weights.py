"""Weights per GPU, quantization formats, the Kimi K3 hardware verdicts, and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.plan import PlanRequest, plan
from oomkit.plan.catalog import find_model
from oomkit.plan.layouts import Layout
from oomkit.plan.quant import FORMATS, QuantScheme, scheme_from_cli, scheme_from_config
from oomkit.plan.weights import weights_for

GIB = 1024**3


def test_formats_bits_with_scales():
    assert FORMATS["mxfp4"].bits_per_param == 4.25
    assert FORMATS["nvfp4"].bits_per_param == 4.5
    assert FORMATS["bf16"].bits_per_param == 16
    assert 8 < FORMATS["fp8"].bits_per_param < 8.01
    assert 4.1 < FORMATS["awq"].bits_per_param < 4.2 and 4.1 < FORMATS["gptq"].bits_per_param < 4.2


def test_llama_8b_weights_match_printed_within_3_percent():
    w = weights_for(find_model("llama-3.1-8b"), Layout(), find_model("llama-3.1-8b").quant)
    printed = 14.9888  # "Loading model weights took 14.9888 GB" (fixture vllm-logs/002)
    assert abs(w.per_gpu_bytes / GIB - printed) / printed < 0.03


def test_kimi_k3_mixed_scheme_keeps_attention_shared_dense_bf16():
    m = find_model("kimi-k3")
    s = m.quant
    assert s.linear_format == "mxfp4"
    fmt = lambda name: s.format_for((name,), True)  # noqa: E731
    assert fmt("model.layers.5.mlp.experts.0.gate_proj") == "mxfp4"
    assert fmt("model.layers.5.self_attn.q_proj") == "bf16"
    assert fmt("model.layers.5.mlp.shared_experts.gate_proj") == "bf16"
    assert fmt("model.layers.0.mlp.gate_proj") == "bf16"
    w = weights_for(m, Layout(tp=8), s)
    assert 1.3e12 < w.by_format_bytes["mxfp4"] * 8 / 4.25 < 2.8e12 * 1.01  # ~2.72T routed params
    assert 40e9 < w.by_format_bytes["bf16"] / 2 < 70e9  # everything else ~50-60B params in BF16
    assert 1.4e12 < w.total_bytes < 1.7e12  # ~1.55 TB (kimi-k3.md)


@pytest.mark.parametrize("gpu,holds", [("GB300", True), ("B300", True), ("B200", False), ("H200", False)])
def test_kimi_k3_eight_gpus_hold_weights_or_not(gpu, holds):
    p = plan(
        PlanRequest(
            model="kimi-k3",
            gpu=gpu,
            gpus=8,
            vllm_version="0.34",
            kv_cache_dtype="fp8",
            max_model_len=1048576,
            gpu_memory_utilization=0.95,
            enable_prefix_caching=True,
        ),
    )
    assert p.fits_load is holds
    assert (p.weights.per_gpu_bytes < p.budget.budget_bytes) is holds


def test_kimi_k3_recipe_strategies_plan():
    base = dict(
        model="kimi-k3",
        gpu="GB300",
        vllm_version="0.34",
        kv_cache_dtype="fp8",
        max_model_len=1048576,
        gpu_memory_utilization=0.95,
    )
    tp8 = plan(PlanRequest(**base, tp=8))
    tep16 = plan(PlanRequest(**base, tp=16, ep=True))
    tp8pp2 = plan(PlanRequest(**{**base, "gpu_memory_utilization": 0.90}, tp=8, pp=2))
    dep16 = plan(PlanRequest(**base, tp=1, dp=16, ep=True))
    for p in (tp8, tep16, tp8pp2):
        assert p.fits_load and p.capacity.fits_one_request
    assert tep16.weights.per_gpu_bytes < tp8.weights.per_gpu_bytes
    assert tp8pp2.weights.per_gpu_bytes < tp8.weights.per_gpu_bytes
    # DEP16 replicates attention and dense parts on every GPU: more weight per GPU than TEP16
    assert dep16.weights.per_gpu_bytes > tep16.weights.per_gpu_bytes


def test_int4_and_nvfp4_checkpoints():
    k25 = find_model("kimi-k2.5")
    assert k25.quant.linear_format == "int4-g32" and "lm_head" in k25.quant.ignore
    nv = find_model("kimi-k2.5-nvfp4")
    assert nv.quant.linear_format == "nvfp4"
    assert nv.quant.format_for(("language_model.model.layers.3.self_attn.q_a_proj",), True) == "bf16"
    oss = find_model("gpt-oss-120b")
    assert oss.quant.linear_format == "mxfp4"
    assert oss.quant.format_for(("model.layers.1.self_attn.q_proj",), True) == "bf16"
    assert oss.quant.format_for(("model.layers.1.mlp.experts.0.gate_proj",), True) == "mxfp4"


def test_cli_quantization_overrides_bf16_checkpoint():
    m = find_model("llama-3.1-70b")
    fp8 = scheme_from_cli("fp8", m.dtype, m.quant)
    bf16 = weights_for(m, Layout(tp=4), m.quant).per_gpu_bytes
    q = weights_for(m, Layout(tp=4), fp8).per_gpu_bytes
    assert 0.5 < q / bf16 < 0.56  # linear layers halve; embedding and head stay bf16


def test_ignore_patterns():
    s = QuantScheme("fp8", "bf16", "fp8", ("gate", "re:.*self_attn.*", "model.layers.*.mlp.router"))
    assert s.format_for(("model.layers.0.block_sparse_moe.gate",), True) == "bf16"
    assert s.format_for(("model.layers.0.mlp.gate_proj",), True) == "fp8"
    assert s.format_for(("model.layers.0.self_attn.o_proj",), True) == "bf16"
    assert s.format_for(("model.layers.7.mlp.router",), True) == "bf16"
    assert scheme_from_config(None, "bfloat16").linear_format == "bf16"


def test_unusable_ignore_patterns_ignore_nothing():
    """Fuzzing found these: a non-string entry, a regex vLLM would refuse, a pattern of 79 KB."""
    s = QuantScheme("fp8", "bf16", "fp8", (7, None, "re:([unclosed", "*" * 80_000 + "gate", "lm_head"))
    assert s.format_for(("model.layers.0.mlp.gate",), True) == "fp8"
    assert s.format_for(("lm_head",), True) == "bf16" and s.format_for(("model.lm_head",), True) == "bf16"
    assert s.format_for(("lm_head_2",), True) == "fp8"


def test_a_thousand_globs_match_like_fnmatch():
    """ModelOpt checkpoints list ~1,300 globs; one compiled test must agree with fnmatch on each."""
    import fnmatch

    globs = tuple(f"language_model.model.layers.{i}.self_attn*" for i in range(1300))
    s = QuantScheme("nvfp4", "bf16", "modelopt", globs)
    for name in (
        "language_model.model.layers.12.self_attn.o_proj",
        "language_model.model.layers.1299.self_attn",
        "language_model.model.layers.1300.self_attn.q",
        "language_model.model.layers.12.mlp.up",
    ):
        expected = any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(name, g + ".*") for g in globs)
        assert (s.format_for((name,), True) == "bf16") == expected


def test_eplb_redundant_experts_add_weight():
    m = find_model("deepseek-v3")
    plain = weights_for(m, Layout(tp=1, dp=16, ep=True), m.quant).per_gpu_bytes
    eplb = weights_for(m, Layout(tp=1, dp=16, ep=True, eplb_redundant=32), m.quant).per_gpu_bytes
    assert eplb > plain


def test_pp_puts_embedding_first_and_head_last():
    m = find_model("llama-3.1-8b")
    w = weights_for(m, Layout(pp=2), m.quant)
    assert len(w.per_stage_bytes) == 2 and sum(w.per_stage_bytes) == pytest.approx(w.total_bytes, rel=1e-6)


MODELS = [
    "llama-3.1-8b",
    "qwen3-32b",
    "mixtral-8x7b",
    "deepseek-v3",
    "qwen3-next-80b",
    "gpt-oss-120b",
    "kimi-k3",
    "nemotron-3-nano-30b",
]


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    gib=st.floats(40, 400),
    extra=st.floats(0.5, 200),
    mml=st.sampled_from([4096, 32768]),
    version=st.sampled_from(["0.11", "0.32", "0.34"]),
)
def test_more_memory_never_lowers_capacity(name, gib, extra, mml, version):
    base = dict(model=name, gpu="H100", gpus=8, vllm_version=version, max_model_len=mml)
    small = plan(PlanRequest(**base, gpu_memory_gib=gib))
    large = plan(PlanRequest(**base, gpu_memory_gib=gib + extra))
    assert large.capacity.kv_cache_tokens >= small.capacity.kv_cache_tokens
    assert large.capacity.num_blocks >= small.capacity.num_blocks


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(MODELS), gib=st.floats(60, 300), version=st.sampled_from(["0.32", "0.34"]))
def test_fp8_kv_never_lowers_tokens(name, gib, version):
    base = dict(model=name, gpu="H100", gpus=8, vllm_version=version, max_model_len=16384, gpu_memory_gib=gib)
    auto = plan(PlanRequest(**base))
    fp8 = plan(PlanRequest(**base, kv_cache_dtype="fp8"))
    assert fp8.capacity.kv_cache_tokens >= auto.capacity.kv_cache_tokens


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4, 8]), ep=st.booleans())
def test_tp_never_raises_per_gpu_weights(name, tp, ep):
    m = find_model(name)
    if ep and not m.moe:
        ep = False
    lower = weights_for(m, Layout(tp=tp, ep=ep), m.quant).per_gpu_bytes
    higher = weights_for(m, Layout(tp=tp * 2, ep=ep), m.quant).per_gpu_bytes
    assert higher <= lower
