"""`oomkit plan` on the command line: JSON keys, exit codes, --compare, --from-log, levers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomkit.cli import cli
from oomkit.plan import PlanRequest, plan
from oomkit.plan.calibrate import calibrate
from oomkit.plan.compare import compare
from oomkit.plan.levers import plan_with_levers

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CPU_LOGS = SHARED / "research" / "cpu-logs"
FIXTURES = SHARED / "fixtures" / "vllm-logs"
STABLE_KEYS = {
    "per_gpu",
    "kv_bytes_per_token",
    "state_bytes_per_sequence",
    "block_size",
    "num_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "fits",
    "estimated_max_model_len",
    "levers",
    "assumptions",
}
PER_GPU = {"capacity_gib", "budget_gib", "weights_gib", "activation_gib", "cudagraph_gib", "other_gib", "kv_cache_gib"}


def run(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "oomkit", "plan", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def invoke(*args: str):
    return CliRunner().invoke(cli, ["plan", *args], catch_exceptions=False)


def test_json_has_the_stable_keys():
    res = invoke(
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        "--vllm-version",
        "0.32",
        "--max-model-len",
        "32768",
        "--concurrency",
        "16",
        "--context",
        "8192",
        "--json",
    )
    assert res.exit_code == 0
    d = json.loads(res.output)
    assert STABLE_KEYS <= set(d) and set(d["per_gpu"]) == PER_GPU
    assert set(d["fits"]) == {"load", "one_request", "target"} and d["fits"]["target"] is True
    assert {a["name"] for a in d["assumptions"]} >= {"activation_gib", "cudagraph_gib", "other_gib"}


def test_human_output_has_table_and_verdicts():
    res = invoke("--model", "kimi-k3", "--gpu", "H200", "--gpus", "8", "--kv-cache-dtype", "fp8")
    assert res.exit_code == 0
    assert "weights" in res.output and "cannot load" in res.output
    assert "more GPUs" in res.output


def test_bad_input_exits_2_with_one_line():
    code, out, err = run("--model", "llama-3.1-8b", "--gpu", "TPU-v9")
    assert code == 2 and "Traceback" not in err and "H100-80GB" in err and len(err.strip().splitlines()) == 1
    code, _, err = run("--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "3")
    assert code == 2 and "attention heads" in err
    code, _, err = run("--model", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-memory-bytes", "lots")
    assert code == 2


def test_unknown_gpu_with_memory_works():
    res = invoke("--model", "qwen3-8b", "--gpu", "my-accelerator", "--gpu-memory-gib", "40", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["per_gpu"]["capacity_gib"] == 40.0


def test_kv_cache_memory_bytes_suffixes():
    res = invoke("--model", "qwen3-8b", "--gpu", "L40S", "--kv-cache-memory-bytes", "4GiB", "--json")
    assert json.loads(res.output)["per_gpu"]["kv_cache_gib"] == 4.0


def test_levers_report_numbers_or_why_not():
    p = plan_with_levers(
        PlanRequest(
            model="kimi-k3", gpu="GB300", gpus=8, vllm_version="0.34", max_model_len=262144, num_speculative_tokens=8
        )
    )
    by = {x.id: x for x in p.levers}
    fp8, replay, dcp = by["fp8_kv"], by["replayssm"], by["dcp"]
    assert fp8.applies and "state keeps its own dtype" in (fp8.why or "")
    assert fp8.after and fp8.before and fp8.after.kv_cache_tokens > fp8.before.kv_cache_tokens
    assert replay.applies and replay.after and replay.before
    assert replay.after.max_concurrency > replay.before.max_concurrency
    assert dcp.applies and dcp.after and dcp.before and dcp.after.kv_cache_tokens > dcp.before.kv_cache_tokens
    small = plan_with_levers(PlanRequest(model="llama-3.1-8b", gpu="L4", vllm_version="0.32"))
    by = {x.id: x for x in small.levers}
    assert not by["dcp"].applies and "TP is 1" in (by["dcp"].why or "")
    assert not by["replayssm"].applies


def test_plan_alone_computes_no_levers():
    """Levers are other plans; the caller asks for them (no hidden recursion inside plan())."""
    assert plan(PlanRequest(model="llama-3.1-8b", gpu="L4", vllm_version="0.32")).levers == ()


def test_lever_json_keeps_its_keys():
    p = plan_with_levers(PlanRequest(model="llama-3.1-8b", gpu="L4", vllm_version="0.32"))
    for lever in p.to_dict()["levers"]:
        assert {"id", "lever", "applies", "flag"} <= set(lever)
        assert ("before" in lever and "after" in lever) or "why" in lever


def test_compare_ranks_layouts_for_kimi_k3():
    rows = compare(
        PlanRequest(
            model="kimi-k3",
            gpu="GB300",
            vllm_version="0.34",
            kv_cache_dtype="fp8",
            max_model_len=262144,
            concurrency=32,
            context=131072,
        ),
        [8, 16],
    )
    labels = [r["label"] for r in rows]
    for want in ("TP8", "TEP8", "TP8xPP2", "TEP16", "DEP16"):
        assert want in labels, labels
    assert any(label.startswith("PD prefill TEP8 + decode DEP8") for label in labels)
    fits = [r["fits_target"] for r in rows]
    assert fits == sorted(fits, reverse=True)  # fitting layouts first


def test_compare_cli_text():
    res = invoke("--model", "llama-3.1-70b", "--gpu", "H100", "--gpus", "4,8", "--compare")
    assert res.exit_code == 0 and "TP4" in res.output and "TP8" in res.output


@pytest.mark.skipif(not CPU_LOGS.exists(), reason="shared/research/cpu-logs not available")
def test_from_log_cpu_fits_runtime_and_reproduces_kv(tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 432,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    cal, after = calibrate(PlanRequest(model=str(tmp_path), gpu="cpu"), [str(CPU_LOGS / "startup_ok_tiny.log")])
    rows = {r.figure: r for r in cal.rows}
    assert "cpu_runtime_gib" in cal.assume
    assert rows["available_kv_cache_gib"].calibrated == pytest.approx(rows["available_kv_cache_gib"].printed, abs=0.011)
    tokens = rows["kv_cache_tokens"]
    assert tokens.calibrated is not None and abs(tokens.calibrated - tokens.printed) / tokens.printed < 0.01


@pytest.mark.skipif(not FIXTURES.exists(), reason="shared/fixtures not available")
def test_from_log_v0_fixture_calibrates_other():
    res = invoke("--model", "llama-3.1-8b", "--from-log", str(FIXTURES / "002.log"), "--json")
    assert res.exit_code == 0
    d = json.loads(res.output)
    rows = {r["figure"]: r for r in d["calibration"]["rows"]}
    assert rows["available_kv_cache_gib"]["calibrated"] == 2.89
    assert "other_gib" in d["calibration"]["assume"]
    assert abs(rows["model_weights_gib"]["error_pct"]) < 3


def test_from_log_without_figures_is_input_error(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("INFO 12-02 10:00:00 [x.py:1] hello\n")
    code, _, err = run("--model", "llama-3.1-8b", "--gpu", "H100", "--from-log", str(log))
    assert code == 2 and "KV-cache figures" in err


def test_list_catalogs():
    res = invoke("--list")
    assert "kimi-k3" in res.output and "GB300" in res.output
