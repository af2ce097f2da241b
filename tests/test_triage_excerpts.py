"""GPU-only behaviour, on constructed excerpts (see fixtures/excerpts/README.md) and on the
labelled real-log corpus in shared/ (accuracy is measured by benchmarks/triage_accuracy.py)."""

import json

import pytest
from conftest import CORPUS, EXCERPTS

from oomkit.triage import analyse

CASES = {
    "v1_0.11_kv_too_small.log": ("kv_cache_allocation", True, "high"),
    "v1_0.28_load_oom.log": ("weight_loading", True, "high"),
    "v1_0.20_profile_oom_frames.log": ("memory_profiling", True, "high"),
    "v1_0.22_capture_oom.log": ("cudagraph_capture", True, None),
    "v1_0.34_sampler_warmup.log": ("memory_profiling", True, "high"),
    "v1_0.32_serving_oom.log": ("serving_decode", True, None),
    "v1_0.32_illegal_access.log": ("not_oom_other", False, "high"),
    "v1_0.32_prompt_too_long.log": ("not_oom_other", False, "high"),
    "v0_0.6_preempt_then_crash.log": ("not_oom_other", False, None),
    # Ready and no failure line: medium (the ready line is a fact; "nothing failed" is what the log left in).
    "v1_0.32_clean_shutdown.log": ("healthy", False, "medium"),
    "v1_0.17_ready_timeout.log": ("timeout", False, "high"),
    "v0_0.6_startfree.log": ("environment", True, "high"),
    "host_kill_137.log": ("weight_loading", True, None),
    "ray_nccl_dmabuf.log": ("network_communication", False, "high"),
    # the log stops inside a traceback: placed by its frames, low confidence, OOM not claimed
    "v1_0.32_cut_serving_traceback.log": ("not_oom_other", False, "low"),
    # A serving crash cut before its exception: not_oom_other (low); the summary keeps "(prefill)".
    "v0_0.6_offline_cut_traceback.log": ("not_oom_other", False, "low"),
    "v1_0.32_traceback_then_serving.log": ("healthy", False, "medium"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_excerpt(name):
    res = analyse([str(EXCERPTS / name)])
    phase, is_oom, confidence = CASES[name]
    assert (res.verdict.phase, res.verdict.is_oom) == (phase, is_oom), res.verdict.summary
    if confidence:
        assert res.verdict.confidence == confidence
    assert res.verdict.advice


def test_kv_figures_and_estimate_quoted():
    res = analyse([str(EXCERPTS / "v1_0.11_kv_too_small.log")])
    f = res.facts.figures
    assert (f["model_weights_gib"], f["available_kv_cache_gib"], f["estimated_max_model_len"]) == (64.38, 1.71, 49712)
    assert "49712" in res.verdict.summary
    assert res.facts.args["max_model_len"] == 131072 and res.facts.args["tensor_parallel_size"] == 1
    assert res.facts.vllm_version == "0.11.0" and res.facts.model == "openai/gpt-oss-120b"


def test_secrets_in_args_are_redacted_in_json():
    text = json.dumps(analyse([str(EXCERPTS / "v1_0.11_kv_too_small.log")]).to_dict())
    assert "sk-live-abcdefghijklmnopqrstuvwx" not in text


def test_oom_line_figures():
    f = analyse([str(EXCERPTS / "v1_0.20_profile_oom_frames.log")]).facts.figures
    assert (f["oom_tried_gib"], f["oom_total_gib"], f["oom_free_gib"], f["oom_pytorch_allocated_gib"]) == (
        8.0,
        79.19,
        3.1,
        72.0,
    )


def test_ray_repeat_counted_and_prefill_decode():
    res = analyse([str(EXCERPTS / "v1_0.32_serving_oom.log")])
    assert res.facts.stats["max_running"] == 64 and res.verdict.phase == "serving_decode"


def test_corpus_floor():
    """Regression floor on the shared labelled corpus; the benchmark prints the per-phase table."""
    logs = sorted(CORPUS.glob("*.log"))
    if not logs:
        pytest.skip("shared corpus not here")
    right = sum(
        analyse([str(p)]).verdict.phase == json.loads(p.with_suffix(".json").read_text())["label"]["phase"]
        for p in logs
    )
    assert right / len(logs) >= 0.85


def test_engine_core_reaped_with_sigkill_reads_as_a_kill(tmp_path):
    """vLLM 0.32 (v1/engine/utils.py) names each dead core proc with its exit code; -9 is SIGKILL,
    as when tests/test_faults_server.py kills the EngineCore or the kernel's OOM killer does. A
    Worker's BrokenPipeError that follows its parent's death must not be taken for the cause."""
    log = tmp_path / "killed.log"
    log.write_text(
        "(EngineCore pid=2211) INFO 12-02 18:20:01 [gpu_model_runner.py:4000] Starting to load model m...\n"
        "(Worker pid=2301) ERROR 12-02 18:20:02 [multiproc_executor.py:800] BrokenPipeError: [Errno 32] Broken pipe\n"
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': -9}\n"
    )
    v = analyse([str(log)]).verdict
    assert (v.phase, v.is_oom) == ("weight_loading", True) and "SIGKILL" in v.summary
    log.write_text(log.read_text().replace("-9}", "1}"))
    assert "SIGKILL" not in analyse([str(log)]).verdict.summary
