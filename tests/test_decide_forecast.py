"""decide sizes an expansion by forecast (issue 17 item 5): on the recorded small-KV ladder run (the
target of 4 dialogs + 25% reserve is above the measured capacity of 2), decide forecasts N DP engines
of the measured server with the step time calibrated on that run, and names the smallest that holds
5 dialogs; without vLLM (simulated by monkeypatching the forecast's vLLM import only) it keeps
ceil(target / capacity) and says why."""

from __future__ import annotations

import json
from pathlib import Path

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
    # The measured server's curve covers every level the ladder measured, for the report to draw.
    measured = {int(p.concurrency) for p in d.capacity.points}
    assert measured and measured <= {r["concurrency"] for r in cands[0]["curve"]}
    assert all({"concurrency", "max_kv_usage_sampled", "ttft_ms_p95"} <= set(r) for r in cands[0]["curve"])
    # The report draws the forecast curves (the measured server and the layout named) through the
    # measured points, labelled forecast and dashed.
    from oomkit.report import render

    page = render(
        str(d.run_dir),
        "html",
        out=str(tmp_path / "r.html"),
        runs_dir=str(d.run_dir.parent),
        now="2026-01-01T00:00:00+00:00",
    )
    html = Path(page).read_text()
    assert f"TTFT p95, {cands[0]['layout']} (forecast)" in html and f"{s['layout']} (forecast)" in html
    assert 'stroke-dasharray="3 3"' in html and "layout (forecast)" in html  # the curve's table too
    md = Path(render(str(d.run_dir), "md", out=str(tmp_path / "r.md"), runs_dir=str(d.run_dir.parent))).read_text()
    assert "not measured:" in md and f"| {s['layout']} | 5 |" in md


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


def test_the_forecast_runs_with_the_measured_servers_retention_interval(tmp_path):
    # A hybrid server's --prefix-cache-retention-interval decides which state blocks the prefix cache
    # keeps; decide's forecast must run vLLM's scheduler with the one the measured server ran.
    from oomkit.decide.evidence import load_all
    from oomkit.decide.facts import DecisionFacts
    from oomkit.decide.requirements import load_requirements
    from oomkit.decide.sizing import _measured_retention

    run = copy_run(tmp_path, "ladder-small-kv")

    def retention_with(args: dict | None) -> int | None:
        manifest = json.loads((run / "manifest.json").read_text())
        if args is not None:
            manifest["profile"]["args"] = {**manifest["profile"].get("args", {}), **args}
        (run / "manifest.json").write_text(json.dumps(manifest))
        runs, set_id = load_all([str(run)], str(tmp_path / "runs"))
        return _measured_retention(DecisionFacts(runs, load_requirements(str(requirements(tmp_path))), set_id))

    assert retention_with(None) == 0  # vLLM's default when the profile sets none
    assert retention_with({"prefix_cache_retention_interval": "None"}) is None
    assert retention_with({"prefix_cache_retention_interval": 4096}) == 4096
