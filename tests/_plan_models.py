"""Tiny models for the planner's real-vLLM tests. Llama variants (GQA, MHA, sliding window) and
the Qwen3-Next hybrid come from oomkit.testbed; the MLA model (DeepSeek-V2 layout, dense MLP)
is built here: the CPU MLA kernel needs kv_lora_rank 512 + rope 64 = 576 (cpu_mla.py).

The MoE and sink kinds (Mixtral, Qwen2-MoE, Qwen3-MoE, GPT-OSS, openPangu) are a config.json and
the testbed tokenizer only: the grid starts vLLM with `--load-format dummy`, which reads no weights.
Each config is the published one's field set (src/oomkit/data/models/) shrunk to the testbed's
sizes; `make(kind, out, field=value)` changes a field (None removes it)."""

from __future__ import annotations

import json
from pathlib import Path

from oomkit.testbed.model import ModelSpec, make_model

MLA_SHAPE = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=None,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=64,
    v_head_dim=64,
    first_k_dense_replace=2,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    n_shared_experts=1,
    max_position_embeddings=4096,
)


_TINY: dict[str, object] = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    bos_token_id=1,
    eos_token_id=2,
    torch_dtype="bfloat16",
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)
_MOE: dict[str, object] = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1)
CONFIG_ONLY: dict[str, dict[str, object]] = {
    # mistralai/Mixtral-8x7B-v0.1: no head_dim (hidden / heads), no layer_types
    "mixtral": dict(
        architectures=["MixtralForCausalLM"],
        model_type="mixtral",
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
    ),
    # Qwen/Qwen1.5-MoE-A2.7B: shared expert, q/k/v bias, use_sliding_window false
    "qwen2moe": dict(
        architectures=["Qwen2MoeForCausalLM"],
        model_type="qwen2_moe",
        **_MOE,
        shared_expert_intermediate_size=128,
        mlp_only_layers=[],
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=2,
    ),
    # Qwen/Qwen3-30B-A3B
    "qwen3moe": dict(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        head_dim=64,
        **_MOE,
        mlp_only_layers=[],
        norm_topk_prob=True,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=2,
    ),
    # openai/gpt-oss-20b without its mxfp4 quantization: per-head attention sinks, window 128 on
    # every other layer, yarn rope
    "gptoss": dict(
        architectures=["GptOssForCausalLM"],
        model_type="gpt_oss",
        head_dim=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        experts_per_token=2,
        intermediate_size=256,
        attention_bias=True,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=131072,
        rope_theta=150000.0,
        rope_scaling=dict(
            rope_type="yarn",
            factor=32.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            truncate=False,
        ),
        swiglu_limit=7.0,
    ),
    # openPangu with static sink attention (vllm/model_executor/models/openpangu.py
    # OpenPanguSinkAttention): K head qk_rope_dim + qk_nope_dim, V head v_channels, param_sink_number
    # sink tokens. No transformers class exists: model_type llama carries the extra fields.
    "pangu": dict(
        architectures=["PanguEmbeddedForCausalLM"],
        model_type="llama",
        qk_rope_dim=32,
        qk_nope_dim=32,
        v_channels=128,
        param_sink_number=128,
        param_sink_with_value=True,
    ),
}


def make(kind: str, out: Path, **kw: object) -> Path:
    if kind == "mla":
        return make_mla(out)
    if kind in CONFIG_ONLY:
        return make_config_only(kind, out, **kw)
    return make_model(out, ModelSpec(kind, **kw))  # type: ignore[arg-type]


def make_config_only(kind: str, out: Path, **fields: object) -> Path:
    """The testbed tokenizer and a tiny config.json of `kind`; no weights (vLLM runs --load-format dummy)."""
    make_model(out, "llama")
    vocab = json.loads((out / "config.json").read_text())["vocab_size"]
    for f in [*out.glob("*.safetensors"), out / "generation_config.json"]:
        f.unlink(missing_ok=True)
    config = {**_TINY, **CONFIG_ONLY[kind], "vocab_size": vocab}
    for key, value in fields.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def make_mla(out: Path) -> Path:
    import torch
    import transformers

    make_model(out, "llama")  # for the tokenizer and chat template; the weights are replaced below
    vocab = len(transformers.AutoTokenizer.from_pretrained(str(out)))
    for f in out.glob("*.safetensors"):
        f.unlink()
    cfg = transformers.DeepseekV2Config(vocab_size=vocab, bos_token_id=1, eos_token_id=2, dtype="bfloat16", **MLA_SHAPE)
    torch.manual_seed(0)
    transformers.DeepseekV2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    data = json.loads((out / "config.json").read_text())
    assert data["kv_lora_rank"] == 512, data
    return out
