"""decide sizes an expansion by forecast (issue 17 item 5): on the recorded small-KV ladder run (the
target of 4 dialogs + 25% reserve is above the measured capacity of 2), decide forecasts N DP engines
of the measured server with the step time calibrated on that run, and names the smallest that holds
5 dialogs; without vLLM (simulated by monkeypatching the forecast's vLLM import only) it keeps
ceil(target / capacity) and says why."""

from __future__ import annotations

import json

import pytest
from test_decide import copy_run, requirements, run_decide

from oomkit.decide.sizing import SIZING_TIME_LIMIT_S


def test_decide_names_the_smallest_forecast_layout_on_a_recorded_ladder(tmp_path):
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    run = copy_run(tmp_path, "ladder-small-kv")
    d = run_decide(tmp_path, [run])
    assert d.verdict == "expand" and d.numbers["engines_needed"] == 3  # the rule's numbers are unchanged
    s = d.to_dict()["forecast_sizing"]
    assert s["status"] == "forecast" and s["forecast"] is True and s["method"] == "forecast"
    assert s["concurrency"] == 5 and s["engines_by_multiplication"] == 3
    assert s["step_time_model"] == "calibrated" and s["step_time_source"] == str(run)
    assert s["workload"] == str(run / "request-set.jsonl") and s["vllm"].startswith("0.32")
    cands = s["candidates"]
    # The measured server itself (one engine) is forecast first and, as measured, does not hold 5.
    assert cands[0]["layout"] == "TP1" and cands[0]["engines"] == 1 and not cands[0]["holds"]
    assert cands[0]["knee"]["concurrency"] is not None and cands[0]["knee"]["concurrency"] <= 5
    held = [c for c in cands if c["holds"]]
    assert held == [cands[-1]] and s["layout"] == held[0]["layout"] == f"TP1xDP{s['engines']}"
    assert [c["engines"] for c in cands] == list(range(1, s["engines"] + 1))  # the smallest that holds
    assert held[0]["rung"]["preemptions"] == 0 and held[0]["rung"]["ttft_ms_p95"] <= 10000
    assert any("forecast (not measured)" in r and s["layout"] in r for r in d.recommendations)
    assert s["wall_s"] < SIZING_TIME_LIMIT_S + 15
    saved = json.loads((d.run_dir / "decision.json").read_text())
    assert saved["forecast_sizing"]["layout"] == s["layout"]


def test_without_vllm_decide_keeps_the_multiplication_and_says_why(tmp_path, monkeypatch):
    from oomkit.forecast import vllm_api

    # Only the forecast's vLLM import is simulated away: no installed distribution, nothing cached.
    monkeypatch.setattr(vllm_api, "_LOADED", [])
    monkeypatch.setattr(vllm_api, "installed_version", lambda: None)
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")])
    s = d.to_dict()["forecast_sizing"]
    assert d.verdict == "expand" and s["status"] == "fallback" and s["forecast"] is False
    assert s["method"] == "ceil(target_with_reserve / capacity)" and s["engines_by_multiplication"] == 3
    assert "vLLM is not installed" in s["reason"] and s["layout"] is None
    assert "expand to 3 replica(s)" in d.recommendations[1]
    assert not any("forecast (not measured)" in r for r in d.recommendations)


def test_no_forecast_when_the_measured_capacity_holds(tmp_path):
    req = requirements(tmp_path, concurrent_dialogs=1, peak_reserve_pct=100)
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    s = d.to_dict()["forecast_sizing"]
    assert d.verdict == "tune" and s["status"] == "not_needed" and "tune" in s["reason"]
