"""oomkit killed with SIGKILL in the middle of `oomkit ladder --profile` with a REAL vLLM CPU server
that it launched: the server dies with it (PR_SET_PDEATHSIG), the run folder stays consistent,
`oomkit runs` lists it as interrupted, and `--resume` (on a new server) finishes it with every
step once. Two server starts, about two minutes on 2 cores; run alone:
    flock /tmp/oomkit-dev.lock .venv/bin/python -m pytest tests/test_resume_server.py -q
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from oomkit.fsio import read_jsonl

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]
REPO = Path(__file__).resolve().parent.parent
PROFILE = str(REPO / "examples" / "testbed-healthy.yaml")
WORKLOAD = str(REPO / "examples" / "workload-testbed.yaml")
LADDER = ["--agent-steps", "1", "--max-concurrency", "2", "--max-history-doublings", "2"]
STEPS = ["short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
SURVIVOR_WAIT_S = 20.0


def oomkit(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oomkit", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def listening_on(port: int) -> list[int]:
    """Processes whose command line names the port (the API server and anything it passed it to)."""
    pids = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if f"--port {port}" in cmd or f"--port={port}" in cmd:
            pids.append(p.info["pid"])
    return pids


def gone_within(procs: list[psutil.Process], port: int, wait_s: float) -> tuple[list[int], float]:
    began = time.monotonic()
    while time.monotonic() - began < wait_s:
        left = [p.pid for p in alive(procs)] + listening_on(port)
        if not left:
            return [], time.monotonic() - began
        time.sleep(0.2)
    return [p.pid for p in alive(procs)] + listening_on(port), wait_s


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    runs = tmp_path_factory.mktemp("resume") / "runs"
    began = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oomkit",
            "ladder",
            "--profile",
            PROFILE,
            "--workload",
            WORKLOAD,
            *LADDER,
            "--runs-dir",
            str(runs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    deadline = time.monotonic() + 400
    run, server = None, []
    while time.monotonic() < deadline and proc.poll() is None:
        run = next(runs.glob("*"), None) if runs.exists() else None
        if run is not None and read_jsonl(run / "steps.jsonl"):
            m = json.loads((run / "manifest.json").read_text())
            server = tree(m["server"]["pid"])  # the API server, EngineCore and helpers, just before the kill
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.1)
    _, err = proc.communicate(timeout=60)
    assert run is not None and proc.returncode == -signal.SIGKILL, err[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    port = int(manifest["base_url"].rsplit(":", 1)[1])
    survivors, gone_s = gone_within(server, port, SURVIVOR_WAIT_S)
    return {
        "runs": runs,
        "run": run,
        "manifest": manifest,
        "server": server,
        "port": port,
        "survivors": survivors,
        "gone_s": gone_s,
        "steps_before": read_jsonl(run / "steps.jsonl"),
        "killed_after_s": time.monotonic() - began,
    }


@pytest.fixture(scope="module")
def resumed(killed):
    listed = oomkit("runs", "--runs-dir", str(killed["runs"]), "--json", timeout=60)
    out = oomkit("ladder", "--resume", killed["run"].name, "--runs-dir", str(killed["runs"]), "--json")
    return {"listed": listed, "out": out}


def test_no_vllm_process_survives_the_sigkill(killed):
    assert len(killed["server"]) >= 2, "the server tree (API server + engine) was seen before the kill"
    assert killed["survivors"] == [], f"still alive {SURVIVOR_WAIT_S:.0f} s after oomkit died: {killed['survivors']}"


def test_the_folder_is_consistent_after_the_kill(killed):
    run = killed["run"]
    assert killed["manifest"]["state"] == "running"  # the owner had no chance to write anything else
    for path in run.iterdir():
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            lines = path.read_text().split("\n")
            assert all(isinstance(json.loads(line), dict) for line in lines[:-1]), path
    assert [s["name"] for s in killed["steps_before"]] == STEPS[: len(killed["steps_before"])]


def test_runs_lists_it_as_interrupted(killed, resumed):
    assert resumed["listed"].returncode == 0, resumed["listed"].stderr
    (info,) = [r for r in json.loads(resumed["listed"].stdout) if r["run_id"] == killed["run"].name]
    assert (info["state"], info["recorded_state"], info["reason"]) == ("interrupted", "running", "owner_gone")
    assert info["stages"] == ["launch", "ladder"] and info["resumable"]
    assert info["resume_command"].startswith(f"oomkit ladder --resume {killed['run'].name}")


def test_resume_finishes_it_with_every_step_once(killed, resumed):
    out = resumed["out"]
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert [s["name"] for s in result["steps"]] == STEPS and result["ran"]
    run = killed["run"]
    steps = read_jsonl(run / "steps.jsonl")
    assert [s["name"] for s in steps] == STEPS
    assert steps[: len(killed["steps_before"])] == killed["steps_before"]  # kept as they were, not re-run
    again = {r["label"] for r in read_jsonl(run / "requests.jsonl") if r["attempt"] == 1}
    assert not again & {s["name"] for s in killed["steps_before"]}
    m = json.loads((run / "manifest.json").read_text())
    assert m["state"] == "complete" and m["ladder_outcome"]["stopped_at"] is None
    server_run = Path(m["resumes"][0]["server_run"])
    assert json.loads((server_run / "manifest.json").read_text())["resume_of"] == str(run)
    listed = json.loads(oomkit("runs", "--runs-dir", str(killed["runs"]), "--json", timeout=60).stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [(run.name, "complete")]  # the new server is a part


def test_the_resumed_server_is_stopped_too(killed, resumed):
    m = json.loads(
        (
            Path(json.loads((killed["run"] / "manifest.json").read_text())["resumes"][0]["server_run"])
            / "manifest.json"
        ).read_text()
    )
    assert m["state"] == "complete" and m["stop"]["survivors"] == []
    assert not psutil.pid_exists(m["server"]["pid"]) or psutil.Process(m["server"]["pid"]).status() == "zombie"
