"""Tiny models for the planner's real-vLLM tests. Llama variants (GQA, MHA, sliding window) and
the Qwen3-Next hybrid come from oomkit.testbed; the MLA model (DeepSeek-V2 layout, dense MLP)
is built here: the CPU MLA kernel needs kv_lora_rank 512 + rope 64 = 576 (cpu_mla.py)."""

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


def make(kind: str, out: Path, **kw: object) -> Path:
    if kind == "mla":
        return make_mla(out)
    return make_model(out, ModelSpec(kind, **kw))  # type: ignore[arg-type]


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
