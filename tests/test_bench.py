"""`oomkit bench` against a real local OpenAI-style server: agent success, server deltas, goodput,
a server that dies mid-run, Ctrl-C, and unusable input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.bench import BenchOptions, bench
from oomkit.cli import main
from oomkit.client.records import RequestRecord
from oomkit.errors import UsageError
from oomkit.fsio import read_jsonl
from oomkit.loadrun.prepare import TargetSpec
from oomkit.loadrun.stats import meets, parse_slos, percentile, summarise

WL = {
    "name": "b",
    "sessions": 4,
    "steps": 3,
    "system_instruction_tokens": 200,
    "format_rules_tokens": 20,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 10,
    "tools": {"count": 2, "schema_tokens": 40, "choice": "required", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 10, "tool_result_tokens": 30},
}


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(WL))
    return str(path)


def spec(fake: FakeOpenAI, tmp_path) -> TargetSpec:
    return TargetSpec(url=fake.url, runs_dir=str(tmp_path / "runs"))


def test_bench_measures_agents_server_and_goodput(tmp_path, workload):
    with FakeOpenAI(kv_capacity=2, token_delay_s=0.002) as fake:
        r = bench(spec(fake, tmp_path), workload, BenchOptions(4, sessions=6, slos={"ttft_ms": 10_000}))
    assert r.client.requests == 18 and r.client.ok == 18 and r.agents.succeeded == 6 and r.agents.success_share == 1
    assert r.client.tool_checks == r.client.tool_checks_valid == 18
    # Gauges are sampled once a second, so a short run may not catch the peak; counters are exact.
    assert r.server.preemptions >= 1 and r.server.max_kv_usage is not None
    assert r.server.prefix_cache_hit_rate > 0 and r.server.requests_by_finish_reason == {"tool_calls": 18}
    assert r.client.slo_attainment == 1.0 and r.client.goodput_rps > 0
    assert r.peak_memory_bytes and not r.died and r.failure is None
    saved = json.loads((r.run_dir / "bench.json").read_text())
    assert saved["agents"]["succeeded"] == 6 and saved["client"]["requests"] == 18


def test_duration_repeats_sessions_and_cuts_the_last(tmp_path, workload):
    with FakeOpenAI(token_delay_s=0.01) as fake:
        r = bench(spec(fake, tmp_path), workload, BenchOptions(2, duration_s=1.0))
    assert r.agents.sessions > 4 or r.agents.cut > 0  # cycled past the set's four sessions, or cut
    assert 0.9 <= r.duration_s < 5 and r.client.errors == 0


def test_invalid_tool_calls_fail_the_agent_loop(tmp_path, workload):
    with FakeOpenAI() as fake:
        fake.mode = "badtool"
        r = bench(spec(fake, tmp_path), workload, BenchOptions(2, sessions=2))
    assert r.client.ok == 6 and r.client.tool_checks_valid == 0 and r.agents.succeeded == 0 and r.agents.failed == 2


def test_server_killed_mid_bench_keeps_what_finished(tmp_path, workload, capsys):
    with FakeOpenAI(token_delay_s=0.002) as fake:
        fake.die_after_tokens = 200  # enough for a few requests, then the server vanishes mid-stream
        WL_TEXT = dict(WL, tools={"count": 0}, output_tokens=20)
        path = tmp_path / "plain.yaml"
        path.write_text(json.dumps(WL_TEXT))
        with pytest.raises(SystemExit) as exit_:
            main(
                [
                    "bench",
                    "--url",
                    fake.url,
                    "--workload",
                    str(path),
                    "--concurrency",
                    "3",
                    "--sessions",
                    "20",
                    "--runs-dir",
                    str(tmp_path / "runs"),
                ]
            )
    assert exit_.value.code == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("oomkit:")]
    assert len(err) == 1 and err[0].startswith("oomkit: error: the server died during the bench")
    run = next((tmp_path / "runs").iterdir())
    records = read_jsonl(run / "requests.jsonl")
    ok = [r for r in records if r["ok"]]
    assert ok and len(ok) >= 5 and any(r["error_kind"] in ("reset", "refused") for r in records)
    saved = json.loads((run / "bench.json").read_text())
    assert saved["died"] and saved["failure"]["kind"] == "engine_dead" and saved["client"]["ok"] == len(ok)
    assert json.loads((run / "manifest.json").read_text())["state"] == "failed"


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_cleanly_and_keeps_records(tmp_path, workload):
    with FakeOpenAI(token_delay_s=0.01) as fake:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "oomkit",
                "bench",
                "--url",
                fake.url,
                "--workload",
                workload,
                "--concurrency",
                "2",
                "--duration",
                "60s",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            # As in a terminal: a test run started in the background (`cmd &` in a script) inherits
            # SIGINT ignored, and Python then keeps it ignored, as nohup'd programs should.
            preexec_fn=_sigint_default,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(fake.requests) < 4:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # fail without leaving a running bench (and a zombie) to the tests after
            proc.communicate()
            raise
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    run = next((tmp_path / "runs").iterdir())
    assert json.loads((run / "manifest.json").read_text())["state"] == "interrupted"
    assert json.loads((run / "bench.json").read_text())["interrupted"] is True
    records = read_jsonl(run / "requests.jsonl")
    assert any(r["ok"] for r in records) and any(r["error_kind"] == "interrupted" for r in records)


@pytest.mark.parametrize(
    "args,code,text",
    [
        (["--concurrency", "2", "--sessions", "1", "--duration", "5s"], 2, "not both"),
        (["--concurrency", "0"], 2, "at least 1"),
        (["--concurrency", "2", "--duration", "soon"], 2, "--duration 'soon'"),
        (["--concurrency", "2", "--slo", "ttft=5"], 2, "NAME=MS"),
    ],
)
def test_usage_errors(tmp_path, workload, capsys, args, code, text):
    with FakeOpenAI() as fake:
        with pytest.raises(SystemExit) as exit_:
            main(["bench", "--url", fake.url, "--workload", workload, "--runs-dir", str(tmp_path), *args])
    assert exit_.value.code == code and text in capsys.readouterr().err


def test_bad_workload_and_bad_url(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsessions: -1\n")
    with FakeOpenAI() as fake:
        with pytest.raises(SystemExit) as exit_:
            main(
                ["bench", "--url", fake.url, "--workload", str(bad), "--concurrency", "1", "--runs-dir", str(tmp_path)]
            )
        assert exit_.value.code == 2
        assert "field sessions: Input should be greater than or equal to 1" in capsys.readouterr().err
        fake.mode = "ok"
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--url", "http://127.0.0.1:9", "--workload", str(bad), "--concurrency", "1"])
    assert exit_.value.code == 1 and "nothing answers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--workload", str(bad), "--concurrency", "1"])
    assert exit_.value.code == 2 and "exactly one of --profile" in capsys.readouterr().err


def test_stats_and_slos():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 95) is None and percentile([7], 99) == 7
    assert parse_slos(["ttft_ms=200", "tpot_ms=20.5"]) == {"ttft_ms": 200, "tpot_ms": 20.5}
    with pytest.raises(UsageError):
        parse_slos(["latency_ms=-1"])
    fast = RequestRecord("a", "", None, None, 0, True, ttft_ms=50, latency_ms=250, output_tokens=11)
    slow = RequestRecord("b", "", None, None, 0, True, ttft_ms=500, latency_ms=900, output_tokens=11)
    failed = RequestRecord("c", "", None, None, 0, False, error_kind="timeout")
    assert meets(fast, {"ttft_ms": 100, "tpot_ms": 20}) and not meets(slow, {"ttft_ms": 100})
    assert not meets(failed, {"latency_ms": 10_000})
    s = summarise([fast, slow, failed], duration_s=2.0, slos={"ttft_ms": 100})
    assert (s.requests, s.ok, s.errors, s.errors_by_kind) == (3, 2, 1, {"timeout": 1})
    assert s.slo_met == 1 and s.goodput_rps == 0.5 and s.tpot_ms_p50 == pytest.approx(30.0)


class _Triage:
    """Stands in for oomkit.triage's TriageResult: only `to_dict()` is read."""

    def __init__(self, verdict):
        self.verdict = verdict

    def to_dict(self):
        return {"verdict": self.verdict}


@pytest.mark.parametrize(
    "verdict,source,phase",
    [
        (
            {
                "phase": "serving_decode",
                "summary": "worker OOM",
                "evidence": [{"file": "server.log", "line": 3, "text": "x"}],
            },
            "server log",
            "serving_decode",
        ),
        (
            {
                "phase": "unknown",
                "summary": "a worker died",
                "evidence": [{"file": "server.log", "line": 9, "text": "y"}],
            },
            "server log",
            "serving_prefill",
        ),
        ({"phase": "healthy", "summary": "ok", "evidence": []}, "client", "serving_prefill"),
    ],
)
def test_failure_from_the_server_log(verdict, source, phase):
    from oomkit.client.probe import ServerInfo
    from oomkit.loadrun.failure import classify
    from oomkit.loadrun.target import Target

    target = Target(
        "http://127.0.0.1:9", ServerInfo("http://127.0.0.1:9", "m", ("m",), None), triage=lambda: _Triage(verdict)
    )
    dead = RequestRecord("r1", "", None, None, 0, False, error_kind="refused")
    failure = classify([dead], target, log_wait_s=0.0)
    assert (failure.kind, failure.source, failure.phase) == ("engine_dead", source, phase)
    if source == "server log":
        assert failure.reason.startswith(verdict["summary"]) and failure.evidence[0] == verdict["evidence"][0]
