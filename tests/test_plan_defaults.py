"""Every default a plan's figures rest on is stated, with why, the flag that pins it and the vLLM
code it follows (issue 14, item 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oomkit.cli import cli
from oomkit.plan import PlanRequest, plan
from oomkit.plan import defaults as defaults_module
from oomkit.plan import state as state_module
from oomkit.plan.levers import plan_with_levers

NAMES_ALWAYS = {"block_size", "enable_prefix_caching", "max_num_batched_tokens", "async_scheduling"}
NAMES_HYBRID = {"mamba_ssm_cache_dtype", "mamba_cache_mode"}


def by_name(p):
    return {d.name: d for d in p.defaults}


@pytest.mark.parametrize("layout", [dict(gpus=8), dict(gpus=16, tp=1, dp=16, ep=True)], ids=["TP8", "DEP16"])
def test_kimi_k3_on_gb300_states_its_state_dtype_and_block(layout):
    p = plan(PlanRequest(model="kimi-k3", gpu="GB300", vllm_version="0.34", kv_cache_dtype="fp8", **layout))
    found = by_name(p)
    assert set(found) == NAMES_ALWAYS | NAMES_HYBRID
    ssm = found["mamba_ssm_cache_dtype"]
    assert ssm.value == "float32" and "KDA" in ssm.why and "MambaStateDtypeCalculator" in ssm.source
    block = found["block_size"]
    assert block.value == p.kv.block_size and "state page" in block.why and block.pin == "--block-size"
    assert found["async_scheduling"].value is True
    assert found["mamba_cache_mode"].value == "align"
    assert all(d.source and d.pin.startswith("--") for d in p.defaults)


def test_flags_pin_the_defaults_and_say_so():
    p = plan(
        PlanRequest(
            model="kimi-k3",
            gpu="GB300",
            gpus=8,
            vllm_version="0.34",
            kv_cache_dtype="fp8",
            mamba_ssm_cache_dtype="bfloat16",
            enable_prefix_caching=False,
            max_num_batched_tokens=4096,
        )
    )
    found = by_name(p)
    assert (
        found["mamba_ssm_cache_dtype"].value == "bfloat16"
        and "--mamba-ssm-cache-dtype" in found["mamba_ssm_cache_dtype"].why
    )
    assert found["enable_prefix_caching"].value is False and found["mamba_cache_mode"].value == "none"
    assert found["max_num_batched_tokens"].value == 4096 and found["max_num_batched_tokens"].why.startswith("--max")


@pytest.mark.parametrize("avx512_bf16,expected", [(True, "float32"), (False, "bfloat16")])
def test_cpu_hybrid_state_dtype_follows_the_host(monkeypatch, avx512_bf16, expected):
    """vLLM's CPU backend resets the GDN state to float32 only where the CPU has AVX-512 BF16."""
    monkeypatch.setattr(state_module, "host_has_avx512_bf16", lambda *a: avx512_bf16)
    monkeypatch.setattr(defaults_module, "host_has_avx512_bf16", lambda *a: avx512_bf16)
    import oomkit.plan.core as core

    monkeypatch.setattr(core, "host_has_avx512_bf16", lambda *a: avx512_bf16)
    p = plan(PlanRequest(model="qwen3-next-80b", gpu="cpu", gpu_memory_gib=64, max_model_len=4096))
    ssm = by_name(p)["mamba_ssm_cache_dtype"]
    assert ssm.value == expected
    assert ("AVX-512 BF16" in ssm.why) == avx512_bf16
    assert by_name(p)["async_scheduling"].value is False


def test_dense_model_has_no_state_defaults():
    p = plan(PlanRequest(model="llama-3.1-8b", gpu="H100-80GB", vllm_version="0.32"))
    assert set(by_name(p)) == NAMES_ALWAYS


def test_text_and_json_show_the_defaults():
    args = ["plan", "--model", "kimi-k3", "--gpu", "GB300", "--gpus", "8", "--kv-cache-dtype", "fp8"]
    text = CliRunner().invoke(cli, args).output
    assert "defaults these figures rest on" in text and "mamba_ssm_cache_dtype = float32" in text
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    names = {d["name"] for d in data["defaults"]}
    assert names == NAMES_ALWAYS | NAMES_HYBRID
    assert all(set(d) == {"name", "value", "why", "pin", "source"} for d in data["defaults"])


def test_bf16_state_lever_states_its_cost():
    p = plan_with_levers(PlanRequest(model="kimi-k3", gpu="GB300", gpus=8, vllm_version="0.34", kv_cache_dtype="fp8"))
    lever = next(x for x in p.levers if x.id == "ssm_bf16")
    assert lever.applies and "cost" in (lever.why or "")
    assert lever.after and lever.before and lever.after.kv_cache_tokens >= lever.before.kv_cache_tokens
