"""Network hygiene: a server oomkit starts listens on 127.0.0.1 unless the profile says otherwise,
and oomkit's own traffic goes to the target it was given and nowhere else. The load commands and
`oomkit launch --check` run in a subprocess with a Python audit hook that logs every socket
connect, send, bind and name lookup; a real local OpenAI-style server (and the fake vLLM of
test_launch_fake) answers them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from _load_fake_server import FakeOpenAI
from test_launch_fake import FAKE_VLLM

from oomkit.launch import parse_profile
from oomkit.launch.server import Server
from oomkit.rundir import RunDir

SRC = Path(__file__).resolve().parent.parent / "src"
# Installs the hook before oomkit is imported, then runs the CLI: `runner.py LOG oomkit-args...`.
RUNNER = textwrap.dedent("""
    import json, os, sys

    LOG = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind", "socket.getaddrinfo",
              "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}

    def hook(event, args):
        if event not in EVENTS:
            return
        if event == "socket.getaddrinfo":
            where = list(args[:2])
        elif event in ("socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"):
            where = [repr(args[0]), None]
        else:
            address = args[1]
            where = list(address[:2]) if isinstance(address, tuple) else [repr(address), None]
        host, port = where
        host = host.decode() if isinstance(host, bytes) else host
        port = port if port is None or isinstance(port, int) else str(port)
        os.write(LOG, (json.dumps({"event": event, "host": host, "port": port}) + "\\n").encode())

    sys.addaudithook(hook)
    from oomkit.cli import main
    sys.exit(main(sys.argv[2:]))
""")
WL = {
    "name": "n",
    "sessions": 2,
    "steps": 2,
    "system_instruction_tokens": 60,
    "format_rules_tokens": 10,
    "user_task_tokens": 10,
    "workflow_metadata_tokens": 5,
    "output_tokens": 6,
    "tools": {"count": 1, "schema_tokens": 20, "choice": "required", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 10, "tool_result_tokens": 20},
}


def foreign(
    events: list[dict[str, Any]], host: str, port: int, binds: tuple[tuple[str, int], ...] = ()
) -> list[dict[str, Any]]:
    """The socket events that reach anything but host:port (and binds other than `binds`)."""
    out = []
    for ev in events:
        if ev["event"] == "socket.bind":
            ok = (ev["host"], ev["port"]) in binds
        elif ev["event"] == "socket.getaddrinfo":
            ok = ev["host"] == host and ev["port"] in (port, str(port), None)
        elif ev["event"] in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            ok = (ev["host"], ev["port"]) == (host, port)
        else:  # a name or address lookup oomkit never needs for a numeric target
            ok = False
        if not ok:
            out.append(ev)
    return out


def audited(
    tmp_path: Path, *args: str, timeout_s: float = 180
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`oomkit ARGS` in a subprocess with the audit hook; its exit and every socket event it made."""
    runner, log = tmp_path / "audit_runner.py", tmp_path / "sockets.jsonl"
    runner.write_text(RUNNER, encoding="utf-8")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(SRC),
        "NO_PROXY": "",
        "HTTP_PROXY": "http://proxy.invalid:3128",
        "HTTPS_PROXY": "http://proxy.invalid:3128",
    }  # must be ignored
    proc = subprocess.run(
        [sys.executable, str(runner), str(log), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=tmp_path,
    )
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


@pytest.fixture
def workload(tmp_path: Path) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(WL))
    return str(path)


# -- where servers listen and where oomkit polls them ---------------------------------------------


def test_a_profile_without_host_listens_on_loopback() -> None:
    argv = parse_profile("model: m\nport: 8123\n").argv(8123)
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize(
    "text, listen",
    [
        ("host: 0.0.0.0", "0.0.0.0"),
        ("host: '::'", "::"),
        ("host: 10.1.2.3", "10.1.2.3"),
        ("args: {host: 0.0.0.0}", "0.0.0.0"),
    ],
)
def test_a_host_in_the_profile_is_passed_as_given(text: str, listen: str) -> None:
    argv = parse_profile(f"model: m\n{text}\n").argv(8123)
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == listen


@pytest.mark.parametrize(
    "text, url",
    [
        ("", "http://127.0.0.1:8123"),
        ("host: 10.1.2.3", "http://10.1.2.3:8123"),
        ("host: '::1'", "http://[::1]:8123"),
        ("host: 0.0.0.0", "http://127.0.0.1:8123"),
        ("host: '::'", "http://[::1]:8123"),  # all interfaces: via loopback
        ("args: {host: 0.0.0.0}", "http://127.0.0.1:8123"),  # vLLM listens everywhere; oomkit still asks loopback
    ],
)
def test_oomkit_polls_the_profile_host_on_the_chosen_port(tmp_path: Path, text: str, url: str) -> None:
    server = Server(parse_profile(f"model: m\n{text}\n"), RunDir.create(tmp_path), 8123)
    assert server.base_url == url  # readiness, /health, the check request, load and /metrics all use it


# -- what oomkit sends, seen by an audit hook -----------------------------------------------------


def test_the_checker_flags_a_foreign_address() -> None:
    ours = [
        {"event": "socket.getaddrinfo", "host": "127.0.0.1", "port": 8000},
        {"event": "socket.connect", "host": "127.0.0.1", "port": 8000},
    ]
    assert foreign(ours, "127.0.0.1", 8000) == []
    stray = [
        {"event": "socket.connect", "host": "127.0.0.2", "port": 9},
        {"event": "socket.getaddrinfo", "host": "telemetry.example.invalid", "port": 443},
        {"event": "socket.connect", "host": "127.0.0.1", "port": 8001},
        {"event": "socket.sendto", "host": "8.8.8.8", "port": 53},
        {"event": "socket.gethostbyname", "host": "'example.invalid'", "port": None},
        {"event": "socket.bind", "host": "0.0.0.0", "port": 0},
    ]
    assert foreign(ours + stray, "127.0.0.1", 8000) == stray


def test_the_hook_sees_a_stray_connect(tmp_path: Path) -> None:
    # The hook itself, in a throwaway run: oomkit plus one connect it never makes.
    proc, events = audited(tmp_path, "--version")
    assert proc.returncode == 0 and foreign(events, "127.0.0.1", 8000) == []
    stray = (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.2', 9), timeout=0.2)\nexcept OSError:\n    pass\n"
    )
    runner = tmp_path / "stray.py"
    runner.write_text(RUNNER.replace("from oomkit.cli import main", stray + "from oomkit.cli import main"))
    log = tmp_path / "stray.jsonl"
    subprocess.run(
        [sys.executable, str(runner), str(log), "--version"],
        capture_output=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"event": "socket.connect", "host": "127.0.0.2", "port": 9} in foreign(events, "127.0.0.1", 8000)


def test_ladder_talks_only_to_its_url(tmp_path: Path, workload: str) -> None:
    with FakeOpenAI(kv_capacity=2, token_delay_s=0.001) as fake:
        proc, events = audited(
            tmp_path,
            "ladder",
            "--url",
            fake.url,
            "--workload",
            workload,
            "--max-concurrency",
            "2",
            "--runs-dir",
            str(tmp_path / "runs"),
        )
    assert proc.returncode == 0, proc.stderr
    assert sum(e["event"] == "socket.connect" for e in events) >= 2
    assert foreign(events, "127.0.0.1", fake.port) == []


def test_bench_talks_only_to_its_url(tmp_path: Path, workload: str) -> None:
    with FakeOpenAI(token_delay_s=0.001) as fake:
        proc, events = audited(
            tmp_path,
            "bench",
            "--url",
            fake.url,
            "--workload",
            workload,
            "--concurrency",
            "2",
            "--sessions",
            "2",
            "--runs-dir",
            str(tmp_path / "runs"),
        )
    assert proc.returncode == 0, proc.stderr
    assert sum(e["event"] == "socket.connect" for e in events) >= 2
    assert foreign(events, "127.0.0.1", fake.port) == []


def test_launch_binds_and_polls_only_loopback(tmp_path: Path) -> None:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM, encoding="utf-8")
    profile = tmp_path / "fake.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "model": "tiny-model",
                "label": "fake",
                "port": "auto",
                "start_timeout_s": 30,
                "stop_timeout_s": 2,
                "start": {"command": [sys.executable, str(script)]},
                "env": {"FAKE_VLLM_MODE": "healthy"},
            }
        )
    )
    proc, events = audited(tmp_path, "launch", str(profile), "--check", "--json", "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["healthy"] and result["request"]["ok"]
    port = int(result["base_url"].rsplit(":", 1)[1])
    manifest = json.loads((Path(result["run_dir"]) / "manifest.json").read_text())
    assert manifest["command"][manifest["command"].index("--host") + 1] == "127.0.0.1"
    assert sum(e["event"] == "socket.connect" for e in events) >= 2
    # The free port is found by binding port 0 on the profile host: a bind, and nothing else foreign.
    assert foreign(events, "127.0.0.1", port, binds=(("127.0.0.1", 0),)) == []
