"""`oomkit launch` against a fake vLLM: a real process that prints real vLLM 0.32 log lines, serves
/health, /v1/models and /v1/completions on 127.0.0.1, and has a child "worker" process. Each
behaviour that matters (ready, exit before ready, never ready, ignoring SIGTERM, a child that
leaves the process group, dying after ready, oomkit being killed) is one mode. Fast: no vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from oomkit.errors import InputError, RunFailed
from oomkit.launch import LaunchFailed, check_profile, launched, parse_profile, serve, stop_run
from oomkit.launch.render import render_result
from oomkit.launch.runner import check_port, free_port
from oomkit.rundir import RunDir
from oomkit.testbed import PROFILES

FAKE_VLLM = textwrap.dedent(r"""
    import http.server, json, os, signal, subprocess, sys, threading, time
    mode = os.environ.get("FAKE_VLLM_MODE", "healthy")
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1]); model = argv[argv.index("--model") + 1]
    P = f"(APIServer pid={os.getpid()}) "
    HEAD = [
        P + "INFO 12-02 16:30:47 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0",
        P + "INFO 12-02 16:30:47 [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'model': 'm', 'api_key': 'sk-live-0123456789abcdefXYZ'}",
        P + "INFO 12-02 16:30:47 [model.py:733] Resolved architecture: LlamaForCausalLM",
        "(EngineCore pid=5526) INFO 12-02 16:30:56 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', tensor_parallel_size=1",
        "(Worker pid=5546) INFO 12-02 16:31:05 [cpu_model_runner.py:68] Starting to load model m...",
        "(Worker pid=5546) INFO 12-02 16:31:05 [default_loader.py:501] Loading weights took 0.01 seconds",
    ]
    READY = [
        "(Worker pid=5546) INFO 12-02 16:31:06 [cpu_worker.py:260] Explicitly set (0.06/16.09) GiB for KV cache on node 0.",
        "(EngineCore pid=5526) INFO 12-02 16:31:06 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 1,024 tokens per request: 64.00x",
        "(EngineCore pid=5526) INFO 12-02 16:31:06 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.05 s",
        P + "INFO 12-02 16:31:07 [entry.py:140] Starting vLLM server on http://127.0.0.1:%d" % port,
        "INFO:     Application startup complete.",
    ]
    KV_FAIL = [
        "(Worker pid=5546) INFO 12-02 15:45:09 [cpu_worker.py:260] Explicitly set (0.0/8.96) GiB for KV cache on node 0.",
        "(EngineCore pid=5526) ERROR 12-02 15:45:10 [core.py:1510] ValueError: To serve at least one request with the model's max seq len (4096), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 1792. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    def say(lines):
        for line in lines:
            print(line, flush=True)
    child_code = "import os, signal, time\n"
    if mode == "setsid_child":
        child_code += "os.setsid()\n"
    if mode in ("stubborn", "setsid_child"):
        child_code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    child_code += "time.sleep(600)\n"
    say(HEAD)
    if mode == "exit_early":
        say(KV_FAIL); sys.exit(1)
    worker = subprocess.Popen([sys.executable, "-c", child_code])
    if mode == "never_ready":
        time.sleep(600)
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code); self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
        def do_GET(self):
            if self.path == "/health": self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"data": [{"id": model}]}); models_answered.set()
            else: self._send(404, {})
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self._send(200, {"choices": [{"text": " a b c d"}], "usage": {"completion_tokens": 4}})
    models_answered = threading.Event()  # what oomkit's ready check asks last
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    say(READY)
    stop = threading.Event()
    def on_term(*_):
        if mode != "stubborn":
            stop.set()
    signal.signal(signal.SIGTERM, on_term)
    if mode == "die_after_ready":  # once oomkit has seen it ready, however long that took
        models_answered.wait(); stop.set()
    stop.wait()
    if mode != "setsid_child":
        worker.terminate(); worker.wait()
    print("INFO:     Shutting down", flush=True)
""")


@pytest.fixture(scope="module")
def fake_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fake") / "fake_vllm.py"
    path.write_text(FAKE_VLLM, encoding="utf-8")
    return path


def fake_profile(script: Path, mode: str, **extra: object) -> object:
    data = {
        "model": "tiny-model",
        "label": f"fake-{mode}",
        "port": "auto",
        "start_timeout_s": 20,
        "stop_timeout_s": 1.5,
        "start": {"command": [sys.executable, str(script)]},
        "env": {"FAKE_VLLM_MODE": mode, "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx"},
        "args": {"api_key": "sk-live-0123456789abcdefXYZ", "max_model_len": 1024},
        **extra,
    }
    import yaml

    return parse_profile(yaml.safe_dump(data), source=str(script.parent / f"{mode}.yaml"))


def all_gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def wait_for(condition, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll a condition instead of sleeping a fixed time: as fast as the machine allows, and a
    clear failure (not a flaky assertion later) when it never holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)


def sampled_with_child(server) -> None:
    """The worker child exists and the memory sampler has taken a sample since (it tracks the tree)."""
    wait_for(lambda: psutil.Process(server.pid).children(recursive=True), what="the worker child")
    memory = server.run_dir / "memory.jsonl"
    lines = memory.read_text().count("\n") if memory.exists() else 0
    wait_for(lambda: memory.exists() and memory.read_text().count("\n") > lines, what="a memory sample")


def test_healthy_launch_follows_phases_and_stops_the_whole_tree(fake_script: Path, tmp_path: Path) -> None:
    events = []
    with launched(fake_profile(fake_script, "healthy"), runs_dir=tmp_path, on_event=events.append) as server:
        assert server.alive()
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.log_path == server.run_dir / "server.log"
        assert server.model_ids == ["tiny-model"]
        sampled_with_child(server)
        tree = [server.pid, *[c.pid for c in psutil.Process(server.pid).children(recursive=True)]]
        assert len(tree) == 2
        assert server.triage().verdict.phase in ("healthy", "unknown")
    result = server.result
    assert result.state == "complete" and result.ready and result.reason is None
    assert [p.phase for p in result.phases][:3] == ["environment", "distributed_init", "weight_loading"]
    assert "ready" in [p.phase for p in result.phases]
    assert all_gone(tree)
    assert result.stop.survivors == () and result.stop.signals == ("SIGTERM",)
    assert set(tree) <= set(result.stop.seen_pids)
    assert [e.kind for e in events][:2] == ["run_dir", "started"] and "ready" in [e.kind for e in events]
    manifest = RunDir.open(result.run_dir).manifest()
    assert manifest["state"] == "complete" and manifest["ready"] is True
    assert manifest["overhead"]["oomkit_cpu_s_until_ready"] >= 0
    assert result.peak_memory_bytes and all(v > 0 for v in result.peak_memory_bytes.values())
    samples = RunDir.open(result.run_dir).read_jsonl("memory.jsonl")
    assert samples and {"t_s", "phase", "rss_bytes", "procs"} <= set(samples[0])


def test_secrets_are_redacted_in_every_file_of_the_run_folder(fake_script: Path, tmp_path: Path) -> None:
    with launched(fake_profile(fake_script, "healthy"), runs_dir=tmp_path) as server:
        pass
    for file in server.run_dir.iterdir():
        text = file.read_text(encoding="utf-8")
        assert "sk-live-0123456789abcdefXYZ" not in text, file.name
        assert "hf_abcdefghijklmnopqrstuvwx" not in text, file.name
    manifest = json.loads((server.run_dir / "manifest.json").read_text())
    assert manifest["profile"]["args"]["api_key"] == "***"
    assert manifest["env"]["profile"]["HF_TOKEN"] == "***"
    assert "--api-key" in manifest["command"] and "***" in manifest["command"]


def test_exit_before_ready_raises_with_the_triage_verdict(fake_script: Path, tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed) as info:
        with launched(fake_profile(fake_script, "exit_early"), runs_dir=tmp_path):
            pytest.fail("must not become ready")
    result = info.value.result
    assert isinstance(info.value, RunFailed) and info.value.exit_code == 1
    assert result.reason == "exited_before_ready" and result.state == "failed" and not result.ready
    assert result.verdict["phase"] == "kv_cache_allocation"
    assert result.figures["estimated_max_model_len"] == 1792
    assert "kv_cache_allocation" in str(info.value)
    assert RunDir.open(result.run_dir).manifest()["state"] == "failed"
    assert "1792" in render_result(result)


def test_never_ready_times_out_and_stops_the_group(fake_script: Path, tmp_path: Path) -> None:
    profile = fake_profile(fake_script, "never_ready", start_timeout_s=2)
    began = time.monotonic()
    result = check_profile(profile, runs_dir=tmp_path).launch
    assert time.monotonic() - began < 15
    assert result.reason == "start_timeout" and not result.ready
    assert result.stop.survivors == () and all_gone(list(result.stop.seen_pids))
    assert len(result.stop.seen_pids) == 2


def test_sigterm_ignored_escalates_to_sigkill(fake_script: Path, tmp_path: Path) -> None:
    with launched(fake_profile(fake_script, "stubborn"), runs_dir=tmp_path) as server:
        sampled_with_child(server)
    stop = server.result.stop
    assert stop.signals == ("SIGTERM", "SIGTERM-group", "SIGKILL-group")
    assert len(stop.killed_pids) == 2 and stop.survivors == ()
    assert all_gone(list(stop.seen_pids))


def test_a_child_that_left_the_group_is_still_stopped(fake_script: Path, tmp_path: Path) -> None:
    with launched(fake_profile(fake_script, "setsid_child"), runs_dir=tmp_path) as server:
        sampled_with_child(server)
        child = psutil.Process(server.pid).children()[0]
        assert os.getpgid(child.pid) != server.pid
    stop = server.result.stop
    assert child.pid in stop.killed_pids and stop.survivors == ()
    assert all_gone([child.pid])


def test_server_dying_after_ready_is_a_failed_run_even_with_exit_code_0(fake_script: Path, tmp_path: Path) -> None:
    result = serve(fake_profile(fake_script, "die_after_ready"), runs_dir=tmp_path)
    assert result.ready and result.state == "failed" and result.reason == "died_after_ready"
    assert result.stop.exit_code == 0 and not result.stop.requested


def test_check_sends_one_request_and_reports_healthy(fake_script: Path, tmp_path: Path) -> None:
    checked = check_profile(fake_profile(fake_script, "healthy"), runs_dir=tmp_path)
    data = checked.to_dict()
    assert checked.healthy and data["ready"] is True and data["request"]["completion_tokens"] == 4
    assert {"ready", "phases", "verdict", "peak_memory_bytes", "run_dir"} <= set(data)
    assert json.loads(json.dumps(data)) == data


def test_port_in_use_fails_before_starting(fake_script: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match=f"port {port} .* in use"):
            check_port("127.0.0.1", port)
        with pytest.raises(InputError, match="in use"):
            check_profile(fake_profile(fake_script, "healthy", port=port), runs_dir=tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # no run folder for bad input
    assert 1024 <= free_port("127.0.0.1") <= 65535


def test_missing_start_command_says_how_to_install(tmp_path: Path) -> None:
    from oomkit.errors import MissingDependency

    profile = parse_profile("model: m\nport: auto\nstart: vllm-not-installed-here serve\n")
    with pytest.raises(MissingDependency, match="not found on PATH"):
        check_profile(profile, runs_dir=tmp_path)
    profile = parse_profile("model: m\nport: auto\nstart: {module: no_such_vllm_module_xyz}\n")
    with pytest.raises(MissingDependency, match="vLLM is not installed") as info:
        check_profile(profile, runs_dir=tmp_path)
    assert "pip install vllm" in info.value.one_line() and info.value.exit_code == 2


LAUNCHER = textwrap.dedent("""
    import sys, time
    from oomkit.launch import parse_profile, serve
    profile = parse_profile(open(sys.argv[1]).read(), source=sys.argv[1])
    serve(profile, runs_dir=sys.argv[2])
""")


def start_owner(fake_script: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], RunDir]:
    """A separate oomkit process that owns a fake server; returns it once the server is ready."""
    import yaml

    profile = tmp_path / "p.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "model": "m",
                "port": "auto",
                "stop_timeout_s": 3,
                "start_timeout_s": 20,
                "start": {"command": [sys.executable, str(fake_script)]},
            }
        )
    )
    owner = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(profile), str(tmp_path / "runs")])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/manifest.json"))
        if runs and "ready_at" in json.loads(runs[0].read_text()):
            return owner, RunDir.open(runs[0].parent)
        time.sleep(0.1)
    owner.kill()
    pytest.fail("fake server did not get ready")


def test_stop_run_signals_the_owner_which_stops_cleanly(fake_script: Path, tmp_path: Path) -> None:
    owner, run = start_owner(fake_script, tmp_path)
    server_pid = run.manifest()["server"]["pid"]
    outcome = stop_run(run.run_id[:15], runs_dir=tmp_path / "runs")
    assert outcome.how == "signalled-owner" and outcome.state == "complete" and outcome.survivors == ()
    assert owner.wait(timeout=10) == 0
    assert all_gone([server_pid])
    assert stop_run(run.path).how == "already-ended"


def test_killing_oomkit_takes_the_server_down_and_stop_cleans_up(fake_script: Path, tmp_path: Path) -> None:
    owner, run = start_owner(fake_script, tmp_path)
    server = run.manifest()["server"]
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=5)
    deadline = time.monotonic() + 10
    while not all_gone([server["pid"]]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all_gone([server["pid"]]), "PR_SET_PDEATHSIG must stop the server when oomkit dies"
    outcome = stop_run(run.path)  # the manifest still says running: --stop finalises it
    assert outcome.how == "killed-group" and outcome.state == "interrupted"
    assert RunDir.open(run.path).state == "interrupted"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from oomkit.cli import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def write_fake_profile(tmp_path: Path, script: Path, mode: str, **extra: object) -> Path:
    import yaml

    path = tmp_path / f"{mode}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "m",
                "label": mode,
                "port": "auto",
                "stop_timeout_s": 1.5,
                "start": {"command": [sys.executable, str(script)]},
                "env": {"FAKE_VLLM_MODE": mode},
                **extra,
            }
        )
    )
    return path


def test_cli_check_json_prints_one_object_and_progress_on_stderr(
    fake_script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = write_fake_profile(tmp_path, fake_script, "healthy")
    code, out, err = run_cli(capsys, "launch", str(profile), "--check", "--json", "--runs-dir", str(tmp_path / "r"))
    assert code == 0
    data = json.loads(out)
    assert data["healthy"] and data["phases"][0] == "environment" and Path(data["run_dir"]).is_dir()
    assert "READY" in err and "weight_loading" in err and "run folder" in err


def test_cli_check_failure_prints_the_verdict_and_exits_1(
    fake_script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = write_fake_profile(tmp_path, fake_script, "exit_early")
    code, out, _ = run_cli(capsys, "launch", str(profile), "--check", "--runs-dir", str(tmp_path / "r"))
    assert code == 1
    assert "NOT READY (exited_before_ready)" in out and "verdict: kv_cache_allocation" in out
    assert "estimated maximum model length: 1792" in out and "survivors: none" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("launch",), "missing PROFILE"),
        (("launch", "nope.yaml", "--check"), "no such profile"),
        (("launch", "--stop", "no-such-run"), "no run folder"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    args: tuple[str, ...],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1


def test_cli_unknown_key_and_port_in_use(fake_script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\nstart_timout_s: 5\n")
    code, _, err = run_cli(capsys, "launch", str(bad), "--check")
    assert code == 2 and "did you mean `start_timeout_s`?" in err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        profile = write_fake_profile(tmp_path, fake_script, "healthy", port=busy.getsockname()[1])
        code, _, err = run_cli(capsys, "launch", str(profile), "--check", "--runs-dir", str(tmp_path / "r"))
    assert code == 2 and "in use" in err and "port: auto" in err


def test_cli_testbed_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "testbed", "profiles", str(tmp_path))
    assert code == 0 and len(out.splitlines()) == len(PROFILES)
    assert (tmp_path / "testbed-healthy.yaml").read_text().count("model: testbed:llama") == 1
