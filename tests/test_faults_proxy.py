"""Faults that need no vLLM, for speed: tests/_fault_proxy.py in front of a tiny fake upstream
(tests/_load_fake_server.py, a real HTTP server that streams like vLLM), a fake server whose engine
dies under `oomkit compare` and under `oomkit ladder` (at a URL, and launched from a profile; each
then resumed), a fake vLLM whose /health turns 503 (engine dead, API server alive), and the port
preflight. The same paths run once against the real vLLM CPU server in tests/test_faults_server.py."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml
from _fault_proxy import FAULTS, FaultProxy
from _load_fake_server import FakeOpenAI

from oomkit.cli import main
from oomkit.client.chat import ChatClient, ChatRequest, ClientOptions
from oomkit.compare import CompareOptions, compare
from oomkit.errors import InputError, RunFailed
from oomkit.launch import LaunchFailed, launched, parse_profile
from oomkit.launch.ports import check_port
from oomkit.runs import list_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import faults  # noqa: E402

STEPS = ["short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat"]
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
STALL_S = 0.5


@pytest.fixture(scope="module")
def upstream():
    with FakeOpenAI() as fake:
        yield fake


def chat_through(proxy: FaultProxy, n: int = 1) -> list:
    async def go():
        async with asyncio.timeout(20):  # a hang fails here, not in CI's global timeout
            async with ChatClient(
                proxy.url, "fake-model", options=ClientOptions(stall_timeout_s=STALL_S, timeout_s=10)
            ) as client:
                return [await client.chat(ChatRequest(str(i), BODY)) for i in range(n)]

    return asyncio.run(go())


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_recorded_with_its_class(upstream, fault):
    with FaultProxy(upstream.url, [fault]) as proxy:
        began = time.monotonic()
        (rec,) = chat_through(proxy)
        took = time.monotonic() - began
        (entry,) = proxy.log
    assert rec.error_kind == faults.EXPECTED_KIND[fault], rec.error
    assert rec.ok == (faults.EXPECTED_KIND[fault] is None)
    assert entry["fault"] == fault and entry["outcome"]
    if fault in ("http_500", "http_503"):
        assert rec.http_status == int(fault[-3:]) and rec.chunks == 0
    else:
        assert rec.http_status == 200  # the status is kept even when the body breaks later
    if fault in ("pass", "no_done"):
        assert rec.output_tokens == 8 and rec.finish_reason == "length"  # everything but [DONE] arrived
    if fault in ("cut", "truncated", "malformed", "not_sse", "stall"):
        assert rec.chunks == 2  # role chunk, then two tokens: the third event is where it breaks
    if fault == "stall":
        assert rec.error.startswith("stalled: nothing more for 0.5 s") and STALL_S <= took < STALL_S + 5
        # The proxy notes ", client hung up" only once the client's socket is closed, which may come
        # after this record: that the proxy stalled is what matters here.
        assert entry["outcome"].startswith("stalled")
    else:
        assert took < 5


def test_other_paths_pass_through_untouched(upstream):
    import httpx

    with FaultProxy(upstream.url, ["http_500"]) as proxy:
        for path in ("/health", "/v1/models", "/metrics"):
            direct, proxied = (httpx.get(base + path, trust_env=False) for base in (upstream.url, proxy.url))
            assert (proxied.status_code, proxied.text) == (direct.status_code, direct.text)
        tokens = httpx.post(proxy.url + "/tokenize", json={"prompt": "abcdefgh"}, trust_env=False).json()
        assert tokens["count"] == 2
        assert proxy.log == []  # only chat requests get faults
        recs = chat_through(proxy, 3)  # keep-alive: three requests on one connection
    assert [r.error_kind for r in recs] == ["http_5xx"] * 3


def test_an_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown faults"):
        FaultProxy("http://127.0.0.1:9", ["pass", "explode"])


def test_bench_through_the_proxy_keeps_every_request(upstream, tmp_path):
    rows = faults.proxy_faults(tmp_path, upstream.url)
    assert [o.scenario for o in rows] == ["API server 5xx", "partial SSE", "stalled stream"]
    for o in rows:
        assert o.survived, (o.scenario, o.why, o.detail["stderr_tail"])
        assert o.sent == o.recorded > 0 and o.unparseable == 0 and o.survivors == []
    stall = rows[2].detail["records"][0]
    assert stall["error"].startswith("stalled") and 2000 <= stall["latency_ms"] < 8000
    log = rows[0].detail["proxy_log"]
    assert [e["fault"] for e in log] == list(faults.SCHEDULE)  # the run went on after every fault


def test_the_folder_check_sees_broken_files(tmp_path):
    run = tmp_path / "r1"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "launch", "state": "running"}))
    (run / "ok.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3')  # a torn last line is allowed
    (run / "bad.jsonl").write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    (run / "bad.json").write_text('{"a": ')
    report = faults.folder_report(tmp_path)
    assert report["torn_last_lines"] == [f"{run / 'ok.jsonl'}:3"]
    assert sorted(report["unparseable"]) == [str(run / "bad.json"), f"{run / 'bad.jsonl'}:2"]
    assert [m["state"] for m in report["unfinished"]] == ["running"]
    (run / "manifest.json").write_text(json.dumps({"kind": "launch", "state": "failed", "reason": None}))
    assert faults.folder_report(tmp_path)["unfinished"]  # failed without a reason


class DiesAfter(FakeOpenAI):
    """A fake vLLM whose engine dies at the n-th chat request: HTTP 500 naming EngineCore, then
    /health 503 (cpu-testbed.md §9); `revive()` is a fresh server on the same port."""

    def __init__(self, n: int, **kw):
        super().__init__(**kw)
        self.die_at = n

    async def _chat(self, body, writer):
        if len(self.requests) + 1 >= self.die_at:
            self.mode = "http500_engine"
        return await super()._chat(body, writer)

    def revive(self) -> None:
        self.die_at, self.mode, self.dead = 10**9, "ok", False


def test_a_dead_baseline_ends_the_compare_and_resume_finishes_it(tmp_path):
    wl = {
        "name": "c",
        "sessions": 2,
        "steps": 2,
        "system_instruction_tokens": 40,
        "format_rules_tokens": 10,
        "user_task_tokens": 10,
        "workflow_metadata_tokens": 10,
        "output_tokens": 6,
        "tools": {"count": 0},
    }
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(wl))
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "profile": str(faults.PROFILE),
                "workload": str(tmp_path / "wl.yaml"),
                "concurrency": 1,
                "repeats": 2,
                "variants": [{"name": "out", "set": {"output_tokens": 3}}],
            }
        )
    )
    with DiesAfter(6, token_delay_s=0.0005) as fake:  # 4 requests per cell: dies in cell 2
        opts = CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url)
        with pytest.raises(RunFailed, match=r"the baseline server died during cell out#1: serving_prefill") as err:
            compare(str(exp), opts)
        folder = Path(err.value.hint.split("--resume ")[1])
        manifest = json.loads((folder / "manifest.json").read_text())
        cells = [json.loads(line) for line in (folder / "cells.jsonl").read_text().splitlines()]
        fake.revive()
        done = compare(str(exp), CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url, resume=str(folder)))
    assert manifest["state"] == "failed" and manifest["reason"] == "baseline_server_died"
    assert manifest["server_deaths"]["baseline"]["cell"] == "out#1"
    assert [c["label"] for c in cells] == ["baseline#1", "out#1"] and cells[0]["failure"] is None
    assert cells[1]["failure"]["kind"] == "engine_dead" and cells[1]["failure"]["evidence"]
    d = done.data
    assert done.run_dir == folder and sorted((c["mode"], c["repeat"]) for c in d["cells"]) == [
        ("baseline", 1),
        ("baseline", 2),
        ("out", 1),
        ("out", 2),
    ]
    assert all(c["failure"] is None and c["errors"] == 0 for c in d["cells"])
    assert [c["label"] for c in d["failed_cells"]] == ["out#1"] and d["server_deaths"] == {}
    assert {v["metric"]: v["verdict"] for v in d["comparisons"]["out"]}["errors"] == "same"
    final = json.loads((folder / "manifest.json").read_text())
    assert final["state"] == "complete" and final["reason"] is None and final["error"] is None


LADDER_WL = {
    "name": "l",
    "sessions": 2,
    "steps": 1,
    "system_instruction_tokens": 40,
    "format_rules_tokens": 10,
    "user_task_tokens": 10,
    "workflow_metadata_tokens": 10,
    "output_tokens": 6,
    "tools": {"count": 1, "schema_tokens": 20, "strict": True, "choice": "required", "parameter_types": ["integer"]},
}
LADDER_OPTS = ["--max-concurrency", "2", "--max-history-doublings", "2"]
BEFORE_C2 = 7  # short 1, tool 1, agent steps 1, history x1 x2 x4, rung c1 1: the 8th request is rung c2's


def test_a_dead_server_under_the_ladder_is_resumed_not_its_result(tmp_path, capsys):
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(LADDER_WL))
    runs = str(tmp_path / "runs")
    with DiesAfter(BEFORE_C2 + 1) as fake:
        with pytest.raises(SystemExit) as exit_:
            main(
                ["ladder", "--url", fake.url, "--workload", str(tmp_path / "wl.yaml"), "--runs-dir", runs, *LADDER_OPTS]
            )
        err = capsys.readouterr().err
        (run,) = (tmp_path / "runs").iterdir()
        manifest = json.loads((run / "manifest.json").read_text())
        steps, rungs = faults.read_jsonl(run / "steps.jsonl"), faults.read_jsonl(run / "rungs.jsonl")
        (info,) = list_runs(runs)
        fake.revive()
        sent = len(fake.requests)
        with pytest.raises(SystemExit) as again:
            main(["ladder", "--resume", info.run_id, "--runs-dir", runs])
        resent = fake.requests[sent:]
    assert exit_.value.code == 1 and "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("oomkit: error:")]
    assert line.startswith("oomkit: error: the server died during step concurrency: serving_prefill:")
    assert line.endswith(f"(the finished steps are kept; continue with --resume {run})")
    assert (manifest["state"], manifest["reason"], manifest["stopped_at"]) == ("failed", "server_died", "concurrency")
    assert "ladder_outcome" not in manifest and manifest["server_death"]["step"] == "concurrency"
    assert steps[-1]["name"] == "concurrency" and steps[-1]["failure"]["kind"] == "engine_dead"
    assert [r["concurrency"] for r in rungs] == [1]  # the rung the server died in is no measurement
    assert (info.state, info.reason, info.resumable) == ("failed", "server_died", True)
    assert info.resume_command == f"oomkit ladder --resume {info.run_id} --runs-dir {runs}"
    assert again.value.code == 0, capsys.readouterr().err
    final = json.loads((run / "manifest.json").read_text())
    assert (final["state"], final["reason"], final["error"], final["server_death"]) == ("complete", None, None, None)
    assert final["ladder_outcome"]["stopped_at"] is None
    records = faults.read_jsonl(run / "requests.jsonl")
    labels = [r["label"] for r in records if r["attempt"] == 1]
    assert sorted(set(labels)) == ["concurrency_c2", "repeat"] and len(labels) == len(resent)
    ladder_json = json.loads((run / "ladder.json").read_text())
    assert [s["name"] for s in ladder_json["steps"]] == STEPS and ladder_json["server_died"] is False
    conc = ladder_json["steps"][4]
    assert [r["concurrency"] for r in conc["detail"]["rungs"]] == [1, 2] and conc["failure"] is None
    assert [r["concurrency"] for r in faults.read_jsonl(run / "rungs.jsonl")] == [1, 2]
    assert list_runs(runs)[0].state == "complete"


FAKE_ENGINE_DIES = r"""
import http.server, json, os, sys
argv = sys.argv[1:]
port, flag = int(argv[argv.index("--port") + 1]), os.environ["FAKE_DEAD_FLAG"]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        code, body = (503 if os.path.exists(flag) else 200), b"{}"
        if self.path == "/v1/models":
            code, body = 200, json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(code); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
print("(APIServer pid=1) INFO 12-02 16:31:07 [entry.py:140] Starting vLLM server", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.mark.parametrize("engine_dies", [False, True])
def test_an_engine_dead_behind_a_live_api_server_fails_the_launch(tmp_path, engine_dies):
    script, flag = tmp_path / "fake.py", tmp_path / "engine-dead"
    script.write_text(FAKE_ENGINE_DIES)
    profile = parse_profile(
        yaml.safe_dump(
            {
                "model": "m",
                "port": "auto",
                "start_timeout_s": 20,
                "stop_timeout_s": 2,
                "start": {"command": [sys.executable, str(script)]},
                "env": {"FAKE_DEAD_FLAG": str(flag)},
            }
        )
    )
    try:
        with launched(profile, runs_dir=tmp_path / "runs") as server:
            if engine_dies:
                flag.touch()  # vLLM answers /health 503 once its engine is dead
        assert not engine_dies, "a dead engine must fail the launch"
        result = server.result
        assert result.state == "complete" and result.reason is None
    except LaunchFailed as err:
        assert engine_dies
        result = err.result
        assert result.state == "failed" and result.reason == "died_after_ready" and result.stop.requested
        assert "GET /health answered 503" in err.one_line()
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["state"] == result.state and manifest["reason"] == result.reason


def test_a_port_bound_by_a_server_still_starting_is_refused():
    # vLLM binds its port with SO_REUSEADDR before the engine starts and listens only when ready.
    with socket.socket() as starting:
        starting.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        starting.bind(("127.0.0.1", 0))
        port = starting.getsockname()[1]
        with pytest.raises(InputError, match="not listening yet"):
            check_port("127.0.0.1", port)


def test_a_port_with_only_time_wait_connections_is_free():
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its port is left in TIME_WAIT
        client.close()
    check_port("127.0.0.1", port)  # a restart right after a stop (no pause) must not be refused


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="the preflight looks for vLLM")
def test_port_taken_fails_in_a_second_with_one_line_and_no_server(tmp_path):
    o = faults.port_taken(tmp_path)
    assert o.survived, o.why
    assert o.detail["rc"] == 2 and o.detail["started"] == [] and o.detail["wall_s"] < 15
    assert o.detail["message"].startswith(f"oomkit: error: port {o.detail['port']} on 127.0.0.1 is in use by pid")


FAKE_VLLM_ON_PORT = r'''
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from _load_fake_server import FakeOpenAI
argv = sys.argv[2:]
port = int(argv[argv.index("--port") + 1])
class OnPort(FakeOpenAI):
    """On the port oomkit launch gives; with --max-num-seqs its engine dies at the 3rd request."""
    async def _chat(self, body, writer):
        if "--max-num-seqs" in argv and len(self.requests) >= 2:
            self.mode = "http500_engine"
        return await super()._chat(body, writer)
fake = OnPort(token_delay_s=0.0005, port=port).start()
print("(APIServer pid=1) INFO 12-02 16:31:07 [entry.py:140] Starting vLLM server", flush=True)
import signal, threading
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
'''


def test_a_variant_server_that_dies_is_that_variants_result(tmp_path):
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM_ON_PORT)
    profile = tmp_path / "profile.yaml"
    command = [sys.executable, str(script), str(Path(__file__).parent)]
    profile.write_text(
        yaml.safe_dump(
            {"model": "m", "port": "auto", "start_timeout_s": 20, "stop_timeout_s": 2, "start": {"command": command}}
        )
    )
    wl = {
        "name": "c",
        "sessions": 2,
        "steps": 2,
        "system_instruction_tokens": 40,
        "format_rules_tokens": 10,
        "user_task_tokens": 10,
        "workflow_metadata_tokens": 10,
        "output_tokens": 6,
        "tools": {"count": 0},
    }
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(wl))
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "profile": str(profile),
                "workload": str(tmp_path / "wl.yaml"),
                "concurrency": 1,
                "repeats": 1,
                "variants": [{"name": "seqs", "set": {"max_num_seqs": 2}}],
            }
        )
    )
    result = compare(str(exp), CompareOptions(runs_dir=str(tmp_path / "runs")))
    d = result.data
    assert [c["mode"] for c in d["cells"]] == ["baseline"] and [c["label"] for c in d["failed_cells"]] == ["seqs#1"]
    assert d["server_deaths"]["seqs"]["cell"] == "seqs#1" and d["server_deaths"]["seqs"]["kind"] == "engine_dead"
    assert "seqs" not in d["comparisons"] and d["server_starts"] == 2 and d["restarts"] == 1
    launch = json.loads((Path(d["server_runs"]["seqs"]) / "manifest.json").read_text())
    assert (launch["state"], launch["reason"]) == ("failed", "died_after_ready")
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["state"] == "complete" and manifest["server_deaths"]["seqs"]["cell"] == "seqs#1"
    from oomkit.compare.render import render

    assert "seqs: the server died during cell seqs#1" in render(d, str(result.run_dir))


FAKE_VLLM_DIES_ONCE = r'''
import asyncio, os, signal, sys, threading
sys.path.insert(0, sys.argv[1])
from _load_fake_server import FakeOpenAI
argv = sys.argv[2:]
port, die_at, died = int(argv[argv.index("--port") + 1]), int(os.environ["FAKE_DIE_AT"]), os.environ["FAKE_DIED"]
class DiesOnce(FakeOpenAI):
    """On the port oomkit launch gives; its engine dies at chat request `die_at`, once per test
    (the `died` file): the server a --resume launches lives."""
    async def _chat(self, body, writer):
        if len(self.requests) + 1 >= die_at and not os.path.exists(died):
            open(died, "w").close()
            print("(APIServer pid=1) ERROR 12-02 16:31:09 [core_client.py:564] Engine core proc EngineCore_DP0 "
                  "died unexpectedly, shutting down client.", flush=True)
            self.mode = "http500_engine"
        return await super()._chat(body, writer)
fake = DiesOnce(token_delay_s=0.0005, port=port).start()
print("(APIServer pid=1) INFO 12-02 16:31:07 [entry.py:140] Starting vLLM server", flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
'''


def test_a_launched_server_that_dies_under_the_ladder_fails_the_launch_and_resume_finishes(tmp_path, capsys):
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM_DIES_ONCE)
    profile = tmp_path / "profile.yaml"
    env = {"FAKE_DIE_AT": str(BEFORE_C2 + 1), "FAKE_DIED": str(tmp_path / "died")}
    profile.write_text(
        yaml.safe_dump(
            {
                "model": "m",
                "port": "auto",
                "start_timeout_s": 20,
                "stop_timeout_s": 2,
                "start": {"command": [sys.executable, str(script), str(Path(__file__).parent)]},
                "env": env,
            }
        )
    )
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(LADDER_WL))
    runs = str(tmp_path / "runs")
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "ladder",
                "--profile",
                str(profile),
                "--workload",
                str(tmp_path / "wl.yaml"),
                "--runs-dir",
                runs,
                *LADDER_OPTS,
            ]
        )
    err = capsys.readouterr().err
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    (info,) = list_runs(runs)
    with pytest.raises(SystemExit) as again:
        main(["ladder", "--resume", info.run_id, "--runs-dir", runs])
    assert exit_.value.code == 1 and len([ln for ln in err.splitlines() if ln.startswith("oomkit: error:")]) == 1
    assert "oomkit: error: the server died during step concurrency:" in err and "--resume" in err
    assert (manifest["kind"], manifest["state"], manifest["reason"]) == ("launch", "failed", "died_after_ready")
    death = manifest["server_death"]
    assert death["step"] == "concurrency" and death["server_run"] == str(run) and death["kind"] == "engine_dead"
    assert any("died unexpectedly" in (e.get("text") or "") for e in death["evidence"])
    assert "ladder_outcome" not in manifest and info.resumable and info.state == "failed"
    assert again.value.code == 0, capsys.readouterr().err
    final = json.loads((run / "manifest.json").read_text())
    assert (final["state"], final["reason"], final["error"], final["server_death"]) == ("complete", None, None, None)
    server_run = Path(final["resumes"][0]["server_run"])
    assert json.loads((server_run / "manifest.json").read_text())["resume_of"] == str(run)
    assert [r.run_id for r in list_runs(runs)] == [run.name]  # the resume's server is a part of the run
    labels = {r["label"] for r in faults.read_jsonl(run / "requests.jsonl") if r["attempt"] == 1}
    assert labels == {"concurrency_c2", "repeat"}


def test_a_stream_that_never_ends_an_event_is_malformed_not_a_wait():
    from oomkit.client.sse import MAX_EVENT_CHARS, MalformedStream, SseDecoder

    decoder = SseDecoder()
    with pytest.raises(MalformedStream, match="no end of event"):
        for _ in range(MAX_EVENT_CHARS // 2**20 + 2):
            decoder.feed(b"data: " + b"x" * 2**20)
