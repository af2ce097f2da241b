"""What the forecast must share with a real ladder to be compared with it (issue 17's backtest): the
engine's prefix-cache retention policy, the ladder's steps before its rungs, and a KV usage figure
sampled the way /metrics is. Runs vLLM's scheduler (no server); skips when vLLM is not importable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("vllm.v1.core.sched.scheduler")

from oomkit.errors import UsageError  # noqa: E402
from oomkit.forecast import ForecastRequest, forecast, plan_request  # noqa: E402
from oomkit.forecast.engine import build_engine  # noqa: E402
from oomkit.forecast.inputs import profile_fields, retention_of  # noqa: E402
from oomkit.forecast.scrape import PHASES, GaugeScrapes  # noqa: E402
from oomkit.forecast.tokens import session_tokens, shared_head  # noqa: E402
from oomkit.forecast.traffic import load_traffic  # noqa: E402
from oomkit.launch.profile import Profile  # noqa: E402
from oomkit.plan import PlanRequest, plan  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "decide"
RUN_A, RUN_B = FIXTURES / "ladder-small-kv", FIXTURES / "investigation-small-kv" / "ladder"
EXAMPLES = Path(__file__).parent.parent / "examples"
HITS, QUERIES = 'vllm:prefix_cache_hits_total{engine="0"}', 'vllm:prefix_cache_queries_total{engine="0"}'


def test_the_kv_manager_gets_the_servers_retention_policy_not_the_dataclass_default():
    # vLLM's KVCacheConfig defaults to None (dense checkpoints); a server passes its CacheConfig's
    # value, 0 unless told otherwise. The forecast built the config with None until issue 17.
    p = plan(PlanRequest(model="qwen3-next-80b", gpu="H200", tp=4, vllm_version="0.32"))
    coordinator = build_engine(p).scheduler.kv_cache_manager.coordinator
    assert coordinator.retention_interval == 0
    assert build_engine(p, None).scheduler.kv_cache_manager.coordinator.retention_interval is None
    assert build_engine(p).settings.to_dict()["prefix_cache_retention_interval"] == 0


def test_a_profile_sets_the_retention_interval(tmp_path):
    base = yaml.safe_load((EXAMPLES / "testbed-hybrid-small-kv.yaml").read_text())

    def with_value(value: object) -> str:
        doc = {**base, "args": {k: v for k, v in base["args"].items() if k != "prefix_cache_retention_interval"}}
        if value is not None:
            doc["args"]["prefix_cache_retention_interval"] = value
        path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return str(path)

    assert retention_of(str(EXAMPLES / "testbed-hybrid-small-kv.yaml")) == 0
    assert retention_of(with_value(None)) == 0  # vLLM's default
    assert retention_of(with_value("None")) is None
    assert retention_of(with_value(512)) == 512
    with pytest.raises(UsageError):
        retention_of(with_value("often"))


def test_a_once_a_second_scrape_misses_a_one_step_peak_and_sees_a_plateau():
    scrapes, gauge = GaugeScrapes.opened(0.0, 0.0), 0.0
    for i in range(1, 301):  # 3 s of 10 ms steps: usage 0.3, except 1.0 after the one step ending at 1.51 s
        t = i / 100
        if scrapes.due(t):
            scrapes.read_until(t, gauge)  # the ticks before this step's end read the previous value
        gauge = 1.0 if i == 151 else 0.3
    # Ticks every 1 s at PHASES offsets of 0.1 s: none falls inside the 10 ms peak, all on the plateau.
    assert scrapes.closed(3.0, 0.0) == pytest.approx(0.3)
    assert len(scrapes.highest) == PHASES


def test_the_sampled_kv_usage_is_in_the_json_and_never_above_the_step_peak(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text(
        yaml.safe_dump(
            {"name": "t", "seed": 3, "sessions": 4, "steps": 3, "system_instruction_tokens": 100, "output_tokens": 64}
            | {"ignore_eos": True, "tools": {"count": 0}, "history": {"tool_result_tokens": 30}}
        ),
        encoding="utf-8",
    )
    req = PlanRequest(model="llama-3.1-8b", gpu="H100", block_size=16, max_model_len=512, num_gpu_blocks_override=40)
    result = forecast(ForecastRequest(plan=req, workload=str(wl), concurrency=(1, 4), refine=False))
    for rung in (r.to_dict() for r in result.layouts[0].rungs):
        assert isinstance(rung["max_kv_usage_sampled"], float)
        assert 0.0 <= rung["max_kv_usage_sampled"] <= rung["max_kv_usage"]


def test_the_history_doubling_has_the_prompt_lengths_the_server_counted():
    traffic = load_traffic(str(RUN_A / "request-set.jsonl"))
    tokens = session_tokens(traffic, 0, shared_head(traffic))
    last = len(traffic.sessions[0].steps) - 1
    measured = {
        r["label"]: r["prompt_tokens"]
        for r in map(json.loads, (RUN_A / "requests.jsonl").read_text().splitlines())
        if r["label"].startswith("history_x") and r["prompt_tokens"]
    }
    assert measured == {"history_x1": 809, "history_x2": 960}
    assert {f"history_x{f}": len(tokens.scaled_prompt(last, f)) for f in (1, 2)} == measured


def test_the_recorded_small_kv_ladder_hits_the_prefix_cache_as_forecast():
    # The ladder's history doubling evicts one cached block of the 11 before the rungs; a forecast
    # warmed with the agent steps alone hit it (0.933 against the 0.875 measured).
    manifest = json.loads((RUN_A / "manifest.json").read_text())
    prof = Profile.model_validate({k: v for k, v in manifest["profile"].items() if k != "source"})
    fields = profile_fields(prof, str(RUN_A))
    req = ForecastRequest(
        plan=PlanRequest(**fields),
        workload=str(RUN_A / "request-set.jsonl"),
        concurrency=(1, 2, 4),  # the ladder's rungs: then it bisected to 3, and so does the forecast
        calibrate_run=str(RUN_B),
    )
    rungs = {r.concurrency: r for r in forecast(req).layouts[0].rungs}
    for c in (1, 4):
        assert rungs[c].prefix_hit_rate == pytest.approx(_measured_hit_rate(RUN_A, f"concurrency_c{c}"), abs=0.01)


def _measured_hit_rate(run: Path, label: str) -> float:
    samples = [
        json.loads(line)["samples"] for line in (run / "metrics.jsonl").read_text().splitlines() if label in line
    ]
    first, last = samples[0], samples[-1]
    return (last[HITS] - first[HITS]) / (last[QUERIES] - first[QUERIES])


def test_plan_request_keeps_the_command_line_over_the_profile():
    req = plan_request(str(EXAMPLES / "testbed-small-kv.yaml"), {"num_gpu_blocks_override": 40, "tp": None})
    assert req.num_gpu_blocks_override == 40 and req.block_size == 128 and req.gpu == "CPU"
    assert req.max_model_len == 1024 and req.enable_prefix_caching is True
