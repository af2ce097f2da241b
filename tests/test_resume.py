"""`--resume` for the ladder and the bench against the local fake server (tests/_load_fake_server.py):
oomkit killed with SIGKILL mid-run, then resumed; finished steps, rungs and sessions are kept and
not sent again, torn lines are dropped, a finished run is left alone, a mismatch is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.bench import BenchOptions, bench
from oomkit.cli import main
from oomkit.fsio import read_jsonl
from oomkit.ladder import LadderOptions, ladder
from oomkit.loadrun.prepare import TargetSpec
from oomkit.rundir import RunDir
from oomkit.runs import list_runs

WL = {
    "name": "t",
    "sessions": 6,
    "steps": 2,
    "system_instruction_tokens": 100,
    "format_rules_tokens": 20,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 12,
    "tools": {"count": 2, "schema_tokens": 40, "strict": True, "choice": "required", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 20, "tool_result_tokens": 200},
}
STEPS = ["short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat"]


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(WL))
    return str(path)


def oomkit_until(args: list[str], runs: Path, file: str, lines: int, timeout_s: float = 60) -> None:
    """Run oomkit in a subprocess and SIGKILL it once `file` of its run folder has `lines` lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomkit", *args, "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if sum(len(read_jsonl(d / file)) for d in runs.glob("*")) >= lines:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]


def folder_is_consistent(run: Path) -> None:
    for path in run.iterdir():
        if path.suffix == ".json":
            json.loads(path.read_text())
        if path.suffix == ".jsonl":
            lines = path.read_text().split("\n")
            assert all(json.loads(line) for line in lines[:-1] if line)  # every line but a torn last one is whole


def test_ladder_killed_then_resumed(tmp_path, workload, capsys):
    runs = tmp_path / "runs"
    with FakeOpenAI(kv_capacity=3, token_delay_s=0.01, max_model_len=2000) as fake:
        oomkit_until(
            ["ladder", "--url", fake.url, "--workload", workload, "--max-concurrency", "8"], runs, "steps.jsonl", 2
        )
        (run,) = runs.iterdir()
        folder_is_consistent(run)
        before = read_jsonl(run / "steps.jsonl")
        (info,) = list_runs(runs)
        assert (info.state, info.reason) == ("interrupted", "owner_gone") and info.resumable
        with open(run / "requests.jsonl", "a") as fh:
            fh.write('{"request_id": "half-writ')  # as if the kill had landed mid-write
        with pytest.raises(SystemExit) as exit_:
            main(["ladder", "--resume", info.run_id, "--runs-dir", str(runs)])
    assert exit_.value.code == 0, capsys.readouterr().err
    steps = read_jsonl(run / "steps.jsonl")
    assert [s["name"] for s in steps] == STEPS and steps[: len(before)] == before
    m = json.loads((run / "manifest.json").read_text())
    assert (
        m["state"] == "complete"
        and m["reason"] is None
        and m["resumes"][0]["torn_lines_dropped"] == {"requests.jsonl": 1}
    )
    records = read_jsonl(run / "requests.jsonl")
    resent = {r["label"] for r in records if r["attempt"] == 1}
    assert not resent & {s["name"] for s in before}  # finished steps are not sent again
    ladder_json = json.loads((run / "ladder.json").read_text())
    assert [s["name"] for s in ladder_json["steps"]] == STEPS and ladder_json["knee"]["concurrency"] == 4
    assert "resumed" in capsys.readouterr().out
    assert list_runs(runs)[0].state == "complete"


def test_rungs_finished_before_the_kill_are_replayed_not_sent(tmp_path, workload):
    spec = TargetSpec(url=None, runs_dir=str(tmp_path / "runs"))
    with FakeOpenAI(kv_capacity=3, token_delay_s=0.002, max_model_len=2000) as fake:
        full = ladder(TargetSpec(url=fake.url, runs_dir=spec.runs_dir), workload, LadderOptions(max_concurrency=8))
        run = RunDir.open(full.run_dir)
        steps, rungs = read_jsonl(run.path / "steps.jsonl"), read_jsonl(run.path / "rungs.jsonl")
        assert [r["concurrency"] for r in rungs] == [1, 2, 4, 3]
        # The state of a run killed during rung c4: four steps and two rungs recorded.
        (run.path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps[:4]))
        (run.path / "rungs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rungs[:2]))
        run.update(ladder_outcome=None)
        run.finish("interrupted")
        sent = len(fake.requests)
        again = ladder(spec, None, LadderOptions(), resume=run.run_id)
    labels = Counter(r["label"] for r in read_jsonl(run.path / "requests.jsonl") if r["attempt"] == 1)
    assert (
        set(labels) == {"concurrency_c4", "concurrency_c3", "repeat"}
        and sum(labels.values()) == len(fake.requests) - sent
    )
    conc = next(s for s in again.steps if s.name == "concurrency")
    assert [r["concurrency"] for r in conc.detail["rungs"]] == [1, 2, 4, 3]
    assert again.knee == full.knee and conc.requests == next(s for s in full.steps if s.name == "concurrency").requests
    assert [s.name for s in again.steps] == STEPS and again.ran


def test_finished_ladder_is_left_alone_and_mismatches_are_refused(tmp_path, workload, capsys):
    runs = str(tmp_path / "runs")
    with FakeOpenAI(max_model_len=2000) as fake:
        done = ladder(TargetSpec(url=fake.url, runs_dir=runs), workload, LadderOptions(max_concurrency=2))
        sent = len(fake.requests)
        manifest = (done.run_dir / "manifest.json").read_text()
        with pytest.raises(SystemExit) as exit_:
            main(["ladder", "--resume", done.run_dir.name, "--runs-dir", runs])
        out = capsys.readouterr().out
        assert exit_.value.code == 0 and "already finished; nothing was sent" in out
        assert len(fake.requests) == sent and (done.run_dir / "manifest.json").read_text() == manifest
        other = tmp_path / "other.yaml"
        other.write_text(json.dumps({**WL, "seed": 5}))
        for args, text in [
            (["--workload", str(other)], "was run with workload"),
            (["--max-concurrency", "16"], "max_concurrency 16 (recorded: 2)"),
            (["--url", "http://127.0.0.1:9"], "another target"),
        ]:
            with pytest.raises(SystemExit) as exit_:
                main(["ladder", "--resume", str(done.run_dir), *args])
            err = capsys.readouterr().err
            assert exit_.value.code == 2 and text in err and "Traceback" not in err
        with pytest.raises(SystemExit) as exit_:
            main(["bench", "--resume", str(done.run_dir)])
        assert exit_.value.code == 2 and "no `oomkit bench` run" in capsys.readouterr().err


def test_bench_killed_then_resumed_counts_every_session_once(tmp_path, workload, capsys):
    runs = tmp_path / "runs"
    with FakeOpenAI(token_delay_s=0.02) as fake:
        oomkit_until(
            ["bench", "--url", fake.url, "--workload", workload, "--concurrency", "2", "--sessions", "10"],
            runs,
            "sessions.jsonl",
            3,
        )
        (run,) = runs.iterdir()
        folder_is_consistent(run)
        kept = {s["session"] for s in read_jsonl(run / "sessions.jsonl") if not s["cut"]}
        assert list_runs(runs)[0].resume_command == f"oomkit bench --resume {run.name} --runs-dir {runs}"
        with pytest.raises(SystemExit) as exit_:
            main(["bench", "--resume", run.name, "--runs-dir", str(runs), "--json"])
    assert exit_.value.code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["agents"]["sessions"] == 10 and result["agents"]["succeeded"] == 10
    assert result["client"]["requests"] == 20 and result["client"]["errors"] == 0
    ended = read_jsonl(run / "sessions.jsonl")
    assert sorted(s["session"] for s in ended if not s["cut"]) == list(range(10))
    again = {s["session"] for s in ended if s["attempt"] == 1}
    assert not again & kept and len(again) == 10 - len(kept)
    # The server's counters cover both attempts (the killed one's scrapes are read back from metrics.jsonl).
    assert result["server"]["prompt_tokens"] >= result["client"]["prompt_tokens"] > 0 and result["duration_s"] > 0
    assert json.loads((run / "manifest.json").read_text())["state"] == "complete"


def test_a_duration_bench_is_not_resumable(tmp_path, workload):
    with FakeOpenAI() as fake:
        spec = TargetSpec(url=fake.url, runs_dir=str(tmp_path))
        done = bench(spec, workload, BenchOptions(2, duration_s=0.5))
    run = RunDir.open(done.run_dir)
    run.update(bench_outcome=None)
    run.finish("interrupted")
    assert not list_runs(tmp_path)[0].resumable
    with pytest.raises(Exception, match="--duration bench cannot be resumed"):
        bench(TargetSpec(runs_dir=str(tmp_path)), None, BenchOptions(), resume=run.run_id)


@pytest.mark.parametrize(
    "args,text",
    [(["--concurrency", "2"], "--workload is required"), (["--workload", "w.yaml"], "--concurrency N is required")],
)
def test_without_resume_bench_still_needs_workload_and_concurrency(tmp_path, capsys, args, text):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--url", "http://127.0.0.1:9", "--runs-dir", str(tmp_path), *args])
    assert exit_.value.code == 2 and text in capsys.readouterr().err
