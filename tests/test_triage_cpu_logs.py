"""Triage of the real vLLM 0.32 CPU logs recorded in the testbed study (shared/research/cpu-logs):
complete server logs of real runs, each with the outcome the study observed."""

import pytest
from conftest import CPU_LOGS, need

from oomkit.triage import analyse

EXPECTED = {
    # file: (phase, is_oom, figure checks)
    "startup_ok_tiny.log": ("healthy", False, {"kv_cache_tokens": 2106880, "kv_cache_device": "CPU"}),
    "startup_fast_eager_kvbytes.log": ("healthy", False, {}),
    "kv_autofit.log": ("healthy", False, {"auto_fit_to": 896, "kv_cache_tokens": 1024, "max_concurrency": 1.14}),
    "kv_override_too_small.log": (
        "kv_cache_allocation",
        True,
        {"estimated_max_model_len": 896, "num_gpu_blocks_override": 8},
    ),
    "kv_bytes_too_small.log": ("kv_cache_allocation", True, {"estimated_max_model_len": 1792}),
    "kv_bytes_too_small_bigmodel.log": (
        "kv_cache_allocation",
        True,
        {"estimated_max_model_len": 2560, "needed_kv_cache_gib": 0.14, "available_kv_cache_gib": 0.09},
    ),
    "kv_bytes_zero.log": ("kv_cache_allocation", True, {}),
    "gmu_099.log": ("environment", True, {"gpu_memory_utilization": 0.99, "requested_memory_gib": 8.87}),
    "gmu_default_092.log": ("environment", True, {"gpu_memory_utilization": 0.92}),
    "gmu_001.log": ("kv_cache_allocation", True, {"requested_kv_cache_gib": -0.6}),
    "weights_exceed_gmu_budget.log": ("kv_cache_allocation", True, {"requested_kv_cache_gib": -1.45}),
    "kvspace_env_too_large.log": ("kv_cache_allocation", True, {}),
    "oom_model_init_alloc.log": ("weight_loading", True, {"oom_tried_bytes": 46137344}),
    "oom_weights_memoryerror.log": ("weight_loading", True, {}),
    "oom_weights_mmap.log": ("weight_loading", True, {}),
    "oom_kv_alloc.log": ("kv_cache_allocation", True, {"oom_tried_bytes": 4293918720}),
    "as_limit_ok_then_shutdown.log": ("healthy", False, {}),  # clean stop that logs EngineDeadError
    "pressure_long.log": ("cache_pressure", False, {}),
    "llama_retention_rejected.log": ("environment", False, {}),  # a setting refused at start-up
    "hybrid_retention_not_multiple.log": ("environment", False, {}),
    "kimilinear_no_prefix_caching.log": ("environment", False, {}),  # No module named 'cutlass'
    "hybrid_qwen3next_ready.log": ("healthy", False, {"block_size": 256}),
    "tools_default.log": ("healthy", False, {}),  # tool-parser tracebacks are per-request, not fatal
    "kill_enginecore_midrun.log": ("unknown", False, {}),  # process vanished, no cause logged
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cpu_log(name):
    res = analyse([str(need(CPU_LOGS / name))])
    phase, is_oom, figures = EXPECTED[name]
    assert res.verdict.phase == phase, res.verdict.summary
    assert res.verdict.is_oom is is_oom
    for key, value in figures.items():
        assert (
            res.facts.figures.get(key) == pytest.approx(value)
            if isinstance(value, float)
            else res.facts.figures.get(key) == value
        ), key
    assert res.facts.vllm_version == "0.32.0" and res.facts.engine == "v1"
    for ev in res.verdict.evidence:
        assert ev.line >= 1 and ev.text


def test_healthy_timeline_in_order():
    res = analyse([str(need(CPU_LOGS / "startup_ok_tiny.log"))])
    assert res.phases_reached() == [
        "environment",
        "distributed_init",
        "weight_loading",
        "memory_profiling",
        "kv_cache_allocation",
        "cudagraph_capture",
        "ready",
    ]  # only /health and /metrics were asked
    lines = [t.line for t in res.timeline]
    assert lines == sorted(lines)
    assert res.facts.args["max_model_len"] == 1024 and res.facts.args["gpu_memory_utilization"] == 0.3


def test_worker_sigkill_is_a_host_kill_suspect_not_a_gpu_oom():
    res = analyse([str(need(CPU_LOGS / "kill_worker_midrun.log"))])
    assert res.verdict.cause == "E-KILLED" and res.verdict.confidence == "low"
    assert res.verdict.phase.startswith("serving")
