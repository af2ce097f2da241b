"""Which layers vLLM gives a sliding window, and how it sizes attention sinks, model class by model
class (oomkit.plan.windows, kv.py). Each rule cites the vLLM source it follows; the truth grid
(benchmarks/data/plan_truth.json) holds the ones the CPU engine runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomkit.errors import UsageError
from oomkit.plan import PlanRequest, plan
from oomkit.plan.kv import attention_bytes_per_token, sliding_lookahead
from oomkit.plan.model import shape_from_config
from oomkit.plan.quant import resolve_kv_dtype
from oomkit.plan.versions import behaviour

TINY = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    vocab_size=432,
    torch_dtype="bfloat16",
)
# openPangu with static sink attention (vllm/model_executor/models/openpangu.py OpenPanguSinkAttention)
PANGU = dict(
    TINY,
    architectures=["PanguEmbeddedForCausalLM"],
    model_type="llama",
    qk_rope_dim=32,
    qk_nope_dim=32,
    v_channels=128,
    param_sink_number=128,
)


def kinds(config: dict) -> list[str]:
    return [layer.attn for layer in shape_from_config(config, "m", "test").layers]


def windows(config: dict) -> list[int | None]:
    return [layer.window for layer in shape_from_config(config, "m", "test").layers]


def planned(tmp_path: Path, config: dict, **request) -> object:
    (tmp_path / "config.json").write_text(json.dumps(config))
    defaults = dict(gpu="cpu", enforce_eager=True, gpu_memory_gib=16.0, kv_cache_memory_bytes=10_000_000)
    return plan(PlanRequest(model=str(tmp_path), **{**defaults, **request}))


def test_sink_attention_page_holds_the_k_head_and_the_v_head():
    """static_sink_attention.py StaticSinkAttention.get_kv_cache_spec: SinkFullAttentionSpec(head_size =
    qk_rope_dim + qk_nope_dim, head_size_v = v_channels); kv_cache_interface.py
    AttentionSpec.state_content_size_bytes = (head_size + head_size_v) x dtype bytes."""
    m = shape_from_config(PANGU, "pangu", "test")
    assert (m.head_dim, m.v_head_dim, m.sink_tokens) == (64, 128, 128)
    assert attention_bytes_per_token(m, "full", 1, resolve_kv_dtype("auto", m.dtype)) == 2 * (64 + 128) * 2


def test_sink_attention_is_full_attention_on_every_layer_whatever_the_window():
    """SinkFullAttentionSpec carries no sliding window (the spec StaticSinkAttention returns), so an
    `interleaved_sliding_window` does not make a sink layer sliding; without sinks openPangu's
    OpenPanguEmbeddedAttention takes it per layer (layer index modulo the list)."""
    assert kinds({**PANGU, "interleaved_sliding_window": 128}) == ["full"] * 4
    plain = {**PANGU, "param_sink_number": 0, "interleaved_sliding_window": [128, None]}
    assert windows(plain) == [128, None, 128, None]


def test_sink_length_must_be_a_multiple_of_the_block(tmp_path):
    """single_type_kv_cache_manager.py SinkFullAttentionManager.__init__:
    assert sink_len % self.block_size == 0."""
    with pytest.raises(UsageError, match="sink_len % block_size"):
        planned(tmp_path, PANGU, max_model_len=2048, block_size=256)
    assert planned(tmp_path, PANGU, max_model_len=2048, block_size=64).capacity.num_blocks > 0


def test_sink_blocks_leave_the_pool_only_before_0_30(tmp_path):
    """0.14-0.29 SinkFullAttentionManager pops sink_len // block_size blocks from the free queue after the
    pool is printed; 0.30-0.34 pops none. 50 blocks of 128: the null block leaves 49, the sink one 48."""
    target = dict(max_model_len=2048, context=896, concurrency=7)  # 7 requests x 7 blocks = 49
    two_layers = {**PANGU, "num_hidden_layers": 2}
    new, old = (planned(tmp_path, two_layers, vllm_version=v, **target) for v in ("0.32", "0.29"))
    assert new.capacity.num_blocks == old.capacity.num_blocks == 50
    assert (new.target_blocks, new.fits_target) == (49, True)
    assert (old.target_blocks, old.fits_target) == (49, False)


def test_a_sink_model_is_said_not_to_start_on_0_30_to_0_34(tmp_path):
    """kv_cache_coordinator.py passes needs_kv_cache_zeroing= to every manager; SinkFullAttentionManager
    .__init__ does not take it (TypeError, printed by vLLM 0.32 CPU after its KV line)."""
    for version, fails in (("0.29", False), ("0.32", True), ("0.34", True)):
        notes = planned(tmp_path, PANGU, max_model_len=2048, vllm_version=version).notes
        assert any("SinkFullAttentionManager" in n for n in notes) is fails, version


def test_gpt_oss_slides_the_even_layers_whatever_layer_types_says():
    """gpt_oss.py OAIAttention._build_attention: sliding_window if layer_idx % 2 == 0 else None; the odd
    layers fall back to CacheConfig.sliding_window, set only when layer_types is all sliding
    (engine/arg_utils.py create_engine_config). GPT-OSS sinks are a logit per head: no KV."""
    oss = dict(TINY, architectures=["GptOssForCausalLM"], model_type="gpt_oss", head_dim=64, sliding_window=128)
    even = ["sliding", "full", "sliding", "full"]
    fffs = ["full_attention"] * 3 + ["sliding_attention"]
    assert kinds({**oss, "layer_types": fffs}) == even
    assert kinds(oss) == even  # no layer_types: GptOssConfig writes alternating ones
    assert kinds({**oss, "layer_types": ["sliding_attention"] * 4}) == ["sliding"] * 4
    assert any("no KV" in n for n in shape_from_config(oss, "m", "test").notes)


@pytest.mark.parametrize(
    "arch, model_type, fields, want",
    [
        # mixtral.py: no per-layer window; MixtralConfig writes no layer_types -> CacheConfig window
        ("MixtralForCausalLM", "mixtral", {"sliding_window": 128}, ["sliding"] * 4),
        # qwen2_moe.py reads no layer_types; Qwen2MoeConfig writes alternating ones, so vLLM leaves
        # CacheConfig.sliding_window unset: every layer full (grid: qwen2moe_use_sliding_l4)
        ("Qwen2MoeForCausalLM", "qwen2_moe", {"use_sliding_window": True, "sliding_window": 128}, ["full"] * 4),
        # Qwen3MoeConfig has no layer_types: use_sliding_window makes every layer sliding
        ("Qwen3MoeForCausalLM", "qwen3_moe", {"use_sliding_window": True, "sliding_window": 128}, ["sliding"] * 4),
        ("Qwen3MoeForCausalLM", "qwen3_moe", {"use_sliding_window": False, "sliding_window": 128}, ["full"] * 4),
        # Qwen2Config: layers from max_window_layers on are sliding; mixed -> no window in vLLM
        ("Qwen2ForCausalLM", "qwen2", {"use_sliding_window": True, "sliding_window": 128, "max_window_layers": 2}, ["full"] * 4),
        ("Qwen2ForCausalLM", "qwen2", {"use_sliding_window": True, "sliding_window": 128, "max_window_layers": 0}, ["sliding"] * 4),
        # llama.py reads layer_types per layer; without them the model-level window covers every layer
        ("LlamaForCausalLM", "llama", {"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 2}, ["sliding", "full"] * 2),
        ("LlamaForCausalLM", "llama", {"sliding_window": 128}, ["sliding"] * 4),
        # ModelConfig: sliding_window 0 means none
        ("MistralForCausalLM", "mistral", {"sliding_window": 0}, ["full"] * 4),
    ],
)  # fmt: skip
def test_window_per_model_class(arch, model_type, fields, want):
    assert kinds(dict(TINY, architectures=[arch], model_type=model_type, **fields)) == want


def test_sliding_window_in_flight_tokens_follow_max_in_flight_tokens_from_0_26():
    """kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request uses
    VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens from 0.26 (async
    scheduling on CUDA: 2 batches); max_num_batched_tokens alone before."""
    llama = "llama-3.1-8b"
    flights = {
        v: plan(PlanRequest(model=llama, gpu="H100-80GB", vllm_version=v, max_num_batched_tokens=2048)).settings[
            "in_flight_tokens"
        ]
        for v in ("0.22", "0.27", "0.32")
    }
    assert flights == {"0.22": 2048, "0.27": 4096, "0.32": 4096}


def test_a_chain_of_mtp_modules_keeps_draft_tokens_below_the_window():
    """SlidingWindowSpec.extra_retained_tokens = num_prefill_lookahead_tokens - 1 (0.28+): several MTP
    modules -> num_speculative_tokens - 1 (config/vllm.py num_prefill_lookahead_tokens); one module or
    EAGLE reads one token ahead -> 0; 0.34 reads the same from speculator_config."""
    m = shape_from_config(dict(TINY, sliding_window=128, num_nextn_predict_layers=3), "m", "test")
    assert sliding_lookahead(behaviour("0.32"), m, 3) == 2
    assert sliding_lookahead(behaviour("0.34"), m, 3) == 2
    assert sliding_lookahead(behaviour("0.27"), m, 3) == 0
    one = shape_from_config(dict(TINY, sliding_window=128, num_nextn_predict_layers=1), "m", "test")
    assert sliding_lookahead(behaviour("0.32"), one, 3) == 0
