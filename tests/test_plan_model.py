"""Model shapes from the shipped configs, the catalogs, and the bad-input messages."""

from __future__ import annotations

import json

import pytest

from oomkit.errors import InputError, UsageError
from oomkit.plan import PlanRequest, plan
from oomkit.plan.catalog import catalog_rows, find_gpu, find_model, gpus, model_names
from oomkit.plan.layouts import Layout, validate

REQUIRED_MODELS = [
    "kimi-k3",
    "kimi-k2",
    "kimi-k2.5",
    "deepseek-v3",
    "deepseek-r1",
    "deepseek-v3.2",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "qwen3-next-80b",
    "qwen3.5-27b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "nemotron-h-56b",
    "nemotron-3-nano-30b",
    "gemma-3-27b",
]
REQUIRED_GPUS = [
    "H100-80GB",
    "H200",
    "B200",
    "B300",
    "GB200",
    "GB300",
    "MI300X",
    "MI355X",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "L4",
    "A10",
    "RTX-3090",
    "RTX-4090",
    "RTX-5090",
]


def test_catalog_has_every_required_model_with_a_source():
    names = model_names()
    assert set(REQUIRED_MODELS) <= set(names)
    assert all(row["source"] for row in catalog_rows())


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_every_catalog_model_plans(name):
    p = plan(PlanRequest(model=name, gpu="B300", gpus=8, vllm_version="0.32", max_model_len=8192))
    assert p.weights.total_params > 1e9
    assert p.kv.kv_bytes_per_token > 0


def test_gpu_catalog_has_required_entries_with_memory_bandwidth_and_domain():
    table = {g.name: g for g in gpus()}
    for name in REQUIRED_GPUS:
        g = table[name]
        assert g.memory_mib and g.hbm_bandwidth_gbps and g.nvlink_domain >= 1 and g.source
    assert table["GB300"].nvlink_domain == 72 and table["H100-80GB"].nvlink_domain == 8


def test_gpu_aliases():
    assert find_gpu("h100").name == "H100-80GB"
    assert find_gpu("NVIDIA H100 80GB HBM3").name == "H100-80GB"
    assert find_gpu("rtx4090").name == "RTX-4090"


def test_unknown_gpu_lists_known_and_accepts_memory():
    with pytest.raises(UsageError) as err:
        find_gpu("TPU-v9")
    assert "H100-80GB" in err.value.message and "--gpu-memory-gib" in err.value.one_line()
    assert find_gpu("TPU-v9", memory_gib=96.0).cuda_total_gib == 96.0


def test_layer_kinds():
    k3 = find_model("kimi-k3")
    assert (k3.count("mla"), k3.count("linear"), k3.num_layers) == (24, 69, 93)
    assert k3.linear.kind == "kda" and k3.vision is not None and k3.moe.latent_hidden == 3584
    assert [layer.mlp for layer in k3.layers[:2]] == ["dense", "moe"]
    q = find_model("qwen3-next-80b")
    assert (q.count("full"), q.count("linear")) == (12, 36) and q.linear.kind == "gdn"
    nano = find_model("nemotron-3-nano-30b")
    assert nano.linear.kind == "mamba2" and nano.count("full") == 6 and nano.count("linear") == 23
    oss = find_model("gpt-oss-120b")
    assert (oss.count("sliding"), oss.count("full")) == (18, 18)
    gemma = find_model("gemma-3-27b")
    assert (gemma.count("sliding"), gemma.count("full")) == (52, 10)
    ds = find_model("deepseek-v3")
    assert ds.count("mla") == 61 and sum(layer.mlp == "dense" for layer in ds.layers) == 3 and ds.mtp_layers == 1
    assert find_model("deepseek-v3.2").mla.indexer_head_dim == 128


def test_model_from_directory_with_nested_text_config(tmp_path):
    data = json.loads(
        json.dumps(
            {
                "architectures": ["X"],
                "text_config": {
                    "hidden_size": 1024,
                    "num_hidden_layers": 4,
                    "num_attention_heads": 8,
                    "num_key_value_heads": 2,
                    "vocab_size": 1000,
                    "max_position_embeddings": 2048,
                    "torch_dtype": "bfloat16",
                },
            }
        )
    )
    (tmp_path / "config.json").write_text(json.dumps(data))
    m = find_model(str(tmp_path))
    assert m.hidden_size == 1024 and m.num_kv_heads == 2 and m.head_dim == 128


def test_missing_field_names_field_and_flag(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 1024, "num_hidden_layers": 4, "vocab_size": 1000}))
    with pytest.raises(InputError) as err:
        find_model(str(tmp_path))
    assert "num_attention_heads" in err.value.message and "--hf-overrides" in err.value.one_line()
    m = find_model(str(tmp_path), {"num_attention_heads": 8})
    assert m.num_attention_heads == 8


def test_missing_max_len_names_the_flag(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100})
    )
    with pytest.raises(UsageError, match="max_position_embeddings") as err:
        plan(PlanRequest(model=str(tmp_path), gpu="L4"))
    assert "--max-model-len" in err.value.one_line()


def test_unknown_model_lists_catalog():
    with pytest.raises(InputError) as err:
        find_model("no-such-model")
    assert "kimi-k3" in err.value.one_line()


@pytest.mark.parametrize(
    "layout,model,words",
    [
        (Layout(tp=3), "llama-3.1-8b", "attention heads"),
        (Layout(tp=4), ("qwen3-32b", {"num_attention_heads": 24, "num_key_value_heads": 6}), "KV heads"),
        (Layout(pp=200), "llama-3.1-8b", "layers"),
        (Layout(tp=8, ep=True, eplb_redundant=0, dp=3), "mixtral-8x7b", "experts"),
        (Layout(ep=True), "llama-3.1-8b", "mixture-of-experts"),
        (Layout(tp=4, dcp=3), "deepseek-v3", "DCP"),
        (Layout(tp=2, dcp=2), "gpt-oss-20b", "sliding"),
    ],
)
def test_impossible_layouts_name_the_constraint(layout, model, words):
    with pytest.raises(UsageError) as err:
        name, overrides = model if isinstance(model, tuple) else (model, None)
        validate(layout, find_model(name, overrides))
    assert words in err.value.message


def test_gpus_must_match_layout():
    with pytest.raises(UsageError, match="does not match"):
        plan(PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=8, tp=2))


def test_unknown_kv_dtype_and_quantization():
    with pytest.raises(InputError, match="kv-cache-dtype"):
        plan(PlanRequest(model="llama-3.1-8b", gpu="H100", kv_cache_dtype="fp3"))
    with pytest.raises(InputError, match="quantization"):
        plan(PlanRequest(model="llama-3.1-8b", gpu="H100", quantization="magic"))
