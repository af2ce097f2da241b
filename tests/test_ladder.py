"""The ladder: knee search, and every step against a real local OpenAI-style server whose
/metrics follow the traffic (tests/_load_fake_server.py: preemptions start above `kv_capacity`)."""

from __future__ import annotations

import asyncio
import json

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.cli import main
from oomkit.ladder import LadderOptions, ladder
from oomkit.loadrun.knee import Rung, find_knee
from oomkit.loadrun.prepare import TargetSpec
from oomkit.workload import ApproxCounter, materialise, parse_workload

WL = {
    "name": "t",
    "sessions": 4,
    "steps": 2,
    "system_instruction_tokens": 100,
    "format_rules_tokens": 20,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 12,
    "tools": {"count": 2, "schema_tokens": 40, "strict": True, "choice": "required", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 20, "tool_result_tokens": 200},
}


def knee_of(bad_from: int, max_c: int = 64, verdict: str = "preemption"):
    seen: list[int] = []

    async def rung(c: int) -> Rung:
        seen.append(c)
        return Rung(c, verdict if c >= bad_from else "ok")

    rungs, knee = asyncio.run(find_knee(rung, max_c))
    return seen, knee


def test_knee_doubles_then_bisects():
    seen, knee = knee_of(11)
    assert seen == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (knee.concurrency, knee.last_good, knee.reason) == (11, 10, "preemption")


def test_knee_at_one_and_no_knee():
    assert knee_of(1)[1].concurrency == 1 and knee_of(1)[1].last_good is None
    seen, knee = knee_of(1000, max_c=20)
    assert seen == [1, 2, 4, 8, 16, 20] and (knee.concurrency, knee.reason, knee.last_good) == (None, "limit", 20)


def test_a_failing_rung_stops_without_bisection():
    seen, knee = knee_of(4, verdict="failure")
    assert seen == [1, 2, 4] and (knee.concurrency, knee.reason, knee.last_good) == (4, "failure", 2)


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(WL))  # JSON is YAML
    return str(path)


def run(fake: FakeOpenAI, workload: str, tmp_path, **opts):
    spec = TargetSpec(url=fake.url, runs_dir=str(tmp_path / "runs"))
    return ladder(spec, workload, LadderOptions(**{"max_concurrency": 8, **opts}))


def test_full_ladder_finds_the_preemption_knee(tmp_path, workload):
    with FakeOpenAI(kv_capacity=3, token_delay_s=0.002, max_model_len=2000) as fake:
        result = run(fake, workload, tmp_path)
    names = [s.name for s in result.steps]
    assert names == ["short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat"]
    assert all(s.ok for s in result.steps), [(s.name, s.notes) for s in result.steps]
    assert (result.knee.concurrency, result.knee.reason, result.knee.last_good) == (4, "preemption", 3)
    conc = result.steps[4]
    assert conc.preemptions >= 1 and conc.phase == "cache_pressure"
    poc = result.poc
    assert poc["short_request_stable"] and poc["tool_calling_valid"] and poc["repeat_run_identical"]
    assert poc["context_limit_found"] and poc["context_limit_tokens"] == 2000 and poc["peak_memory_recorded"]
    assert any("hours" in u for u in poc["untested"])
    files = {p.name for p in result.run_dir.iterdir()}
    assert {
        "poc.json",
        "ladder.json",
        "steps.jsonl",
        "requests.jsonl",
        "metrics.jsonl",
        "request-set.jsonl",
        "manifest.json",
    } <= files
    assert json.loads((result.run_dir / "manifest.json").read_text())["state"] == "complete"
    lines = (result.run_dir / "requests.jsonl").read_text().splitlines()
    assert len(lines) == sum(s.requests for s in result.steps)


def test_history_doubling_stops_at_the_context(tmp_path, workload):
    with FakeOpenAI(max_model_len=1500) as fake:
        result = run(fake, workload, tmp_path, max_concurrency=1)
    hist = next(s for s in result.steps if s.name == "history_doubling")
    rungs = hist.detail["rungs"]
    assert [r["ok"] for r in rungs][-1] is False and rungs[-1]["error_kind"] == "context_length"
    assert all(r["ok"] for r in rungs[:-1]) and hist.ok and hist.errors == 0
    sizes = [r["prompt_tokens"] for r in rungs]
    assert sizes == sorted(sizes) and hist.detail["context"]["limit_tokens"] == 1500


def test_ladder_stops_at_the_first_failure_and_classifies_it(tmp_path, workload, capsys):
    with FakeOpenAI() as fake:
        fake.mode = "inband_engine"
        with pytest.raises(SystemExit) as exit_:
            main(["ladder", "--url", fake.url, "--workload", workload, "--runs-dir", str(tmp_path), "--json"])
    assert exit_.value.code == 1
    out = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in out["steps"]] == ["short_request"] and out["stopped_at"] == "short_request"
    step = out["steps"][0]
    assert step["ok"] is False and step["phase"] == "serving_decode" and step["errors"] == 1
    assert out["failure"]["kind"] == "engine_dead" and out["failure"]["source"] == "client"
    assert any("tool_call" in u and "not reached" in u for u in out["poc"]["untested"])
    assert set(step) >= {
        "name",
        "ok",
        "phase",
        "peak_memory_bytes",
        "max_kv_usage",
        "preemptions",
        "ttft_ms_p50",
        "ttft_ms_p95",
        "latency_ms_p95",
        "errors",
    }
    assert set(out["knee"]) >= {"concurrency", "reason"}
    assert {
        "short_request_stable",
        "tool_calling_valid",
        "repeat_run_identical",
        "context_limit_found",
        "peak_memory_recorded",
        "untested",
    } <= set(out["poc"])


def test_invalid_tool_calls_are_reported_but_do_not_stop(tmp_path, workload):
    with FakeOpenAI(kv_capacity=100) as fake:
        fake.mode = "badtool"
        result = run(fake, workload, tmp_path, max_concurrency=2)
    tool = result.steps[1]
    assert tool.name == "tool_call" and not tool.ok and tool.failure is None
    assert tool.detail["strict"] is True and "not JSON" in tool.detail["problems"][0]
    assert not result.poc["tool_calling_valid"] and len(result.steps) == 6


def test_reasoning_separated_or_not(tmp_path, workload):
    with FakeOpenAI(reasoning=True) as fake:
        ok = run(fake, workload, tmp_path, max_concurrency=1, expect_reasoning=True)
        fake.reasoning = False
        fake.mode = "think_in_content"
        leaked = run(fake, workload, tmp_path, max_concurrency=1)
    assert ok.steps[0].ok and ok.steps[0].detail["reasoning_separated"] is True
    assert not leaked.steps[0].ok and leaked.steps[0].detail["reasoning_separated"] is False


def test_reusing_the_request_set_sends_the_same_requests(tmp_path, workload):
    with FakeOpenAI() as fake:
        first = run(fake, workload, tmp_path, max_concurrency=1)
        sent_first = [json.dumps(b, sort_keys=True) for b in fake.requests]
        fake.requests.clear()
        second = run(fake, str(first.run_dir / "request-set.jsonl"), tmp_path, max_concurrency=1)
        sent_second = [json.dumps(b, sort_keys=True) for b in fake.requests]
    assert second.request_set_id == first.request_set_id and sent_first == sent_second


def test_the_table_has_a_row_per_step(tmp_path, workload, capsys):
    with FakeOpenAI(kv_capacity=3, token_delay_s=0.002) as fake:
        with pytest.raises(SystemExit) as exit_:
            main(
                [
                    "ladder",
                    "--url",
                    fake.url,
                    "--workload",
                    workload,
                    "--runs-dir",
                    str(tmp_path),
                    "--max-concurrency",
                    "4",
                ]
            )
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["step", "ok", "phase"]
    assert "knee: at concurrency 4 (preemption; last good 3)" in out and "run folder:" in out


def test_default_workload_is_built_in():
    rs = materialise(parse_workload({"name": "default-agent"}), ApproxCounter())
    assert rs.probe("short") and rs.probe("tool") and len(rs.sessions()) == 8
