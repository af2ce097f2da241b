"""`oomkit bench --clients N` (and `--ray`): the sessions split over client processes or Ray actors,
one run folder, and a client killed mid-run loses only its unfinished requests, counted as client
losses. Against the fake OpenAI streaming server (a real HTTP server speaking vLLM's protocol)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from _load_fake_server import FakeOpenAI

from oomkit.bench import BenchOptions, bench
from oomkit.errors import UsageError
from oomkit.loadrun.prepare import TargetSpec

HAS_RAY = importlib.util.find_spec("ray") is not None
WL = {
    "name": "clients",
    "sessions": 6,
    "steps": 2,
    "system_instruction_tokens": 40,
    "format_rules_tokens": 10,
    "user_task_tokens": 10,
    "workflow_metadata_tokens": 5,
    "output_tokens": 24,
    "tools": {"count": 1, "schema_tokens": 20, "choice": "none", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 5, "tool_result_tokens": 10},
}


def _spec(url: str, runs: Path) -> TargetSpec:
    return TargetSpec(url=url, runs_dir=str(runs), memory="none")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]


def test_two_client_processes_one_run_folder(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(json.dumps(WL))
    with FakeOpenAI(token_delay_s=0.001) as server:
        result = bench(_spec(server.url, tmp_path / "runs"), str(workload), BenchOptions(concurrency=3, clients=2))
    assert result.client.requests == 12 and result.client.ok == 12 and result.client.client_lost == 0
    assert len(_records(result.run_dir)) == 12
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [c["where"].split(":")[0] for c in manifest["clients"]] == ["local", "local"]
    assert [c["records_via"] for c in manifest["clients"]] == ["pipe", "pipe"]
    assert manifest["partial"] is None


def _kill_a_client_when_busy(stop: threading.Event) -> None:
    me = psutil.Process()
    while not stop.is_set():
        kids = [p for p in me.children(recursive=True) if "spawn_main" in _cmdline(p)]
        if len(kids) >= 2 and _streaming(kids[-1]):  # kill it mid-stream, not before it sent anything
            os.kill(kids[-1].pid, signal.SIGKILL)
            return
        time.sleep(0.05)  # a polling interval, not a wait for something to happen


def _cmdline(proc: psutil.Process) -> str:
    """A child that is gone or a zombie (one an earlier test left unreaped) has none."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _streaming(proc: psutil.Process) -> bool:
    """The client process holds an open connection to the server: its streams have started."""
    try:
        connections = proc.net_connections(kind="tcp") if hasattr(proc, "net_connections") else proc.connections()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return any(c.status == psutil.CONN_ESTABLISHED for c in connections)


def test_a_killed_client_is_a_client_loss_and_the_run_is_partial(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(json.dumps({**WL, "output_tokens": 60}))
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_client_when_busy, args=(stop,), daemon=True)
    with FakeOpenAI(token_delay_s=0.05) as server:
        killer.start()
        try:
            result = bench(_spec(server.url, tmp_path / "runs"), str(workload), BenchOptions(concurrency=4, clients=2))
        finally:
            stop.set()
    assert result.client.client_lost >= 1
    assert result.client.errors == 0  # a dead client is never a server error
    assert result.failure is None
    assert result.agents.cut >= 1
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert "clients died" in (manifest["partial"] or "")
    kinds = {r.get("error_kind") for r in _records(result.run_dir)}
    assert kinds <= {None, "client_lost"}


def test_ray_needs_clients() -> None:
    with pytest.raises(UsageError, match="--clients"):
        BenchOptions(concurrency=2, ray="").check()


@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (the `ray` extra)")
def test_ray_actor_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    workload = tmp_path / "w.yaml"
    workload.write_text(json.dumps(WL))
    with FakeOpenAI(token_delay_s=0.001) as server:
        result = bench(
            _spec(server.url, tmp_path / "runs"), str(workload), BenchOptions(concurrency=3, clients=2, ray="local")
        )
    assert result.client.ok == 12
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert all(c["where"].startswith("ray:") for c in manifest["clients"])
    assert [c["records_via"] for c in manifest["clients"]] == ["socket", "socket"]
