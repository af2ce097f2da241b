"""Faults with the real vLLM CPU server (issue 7), each driven through the `oomkit` command line by
the scenario functions of benchmarks/faults.py (which prints the same outcomes as a table); these
tests check the details. Servers, one at a time: a start whose EngineCore is SIGKILLed (cut short),
a start that fails at vLLM's bind (about 15 s), a launched comparison whose EngineCore is SIGKILLed
in its second cell, a launched ladder whose EngineCore is SIGKILLed in a rung after c1 and the server its
`--resume` launches, then one test-owned server (tests/_load_vllm.py) for `compare --resume` and for
the fault proxy (tests/_fault_proxy.py: 5xx, partial SSE, a stall). About 3 minutes on 2 cores:

    flock /tmp/oomkit-vllm.lock .venv/bin/python -m pytest tests/test_faults_server.py -q
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import faults  # noqa: E402

# vLLM adds the exit code (-9) only when it reaped the process in time; else "Failed core proc(s): {}".
CORE_FAILED = "Engine core initialization failed"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("oomkit: error:")]


@pytest.fixture(scope="module")
def start_killed(tmp_path_factory):
    return faults.engine_killed_during_start(tmp_path_factory.mktemp("start"))


def test_engine_killed_during_start_fails_the_launch_with_the_evidence(start_killed):
    o = start_killed
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    assert "VLLM::EngineCore" in o.detail["injected"]
    data = o.detail["result"]
    assert o.detail["rc"] == 1 and data["ready"] is False and data["healthy"] is False
    assert (data["state"], data["reason"]) == ("failed", "exited_before_ready") and data["request"] is None
    assert any(CORE_FAILED in e["text"] for e in data["verdict"]["evidence"])
    assert data["verdict"]["phase"] != "healthy"  # (what triage makes of the kill: see docs/reliability.md)
    assert data["stop"]["survivors"] == [] and o.survivors == [] and len(data["stop"]["seen_pids"]) >= 2
    (manifest,) = (m for m in o.detail["folders"]["manifests"] if m["kind"] == "launch")
    assert (manifest["state"], manifest["reason"]) == ("failed", "exited_before_ready")
    assert "Traceback" not in o.detail["stderr_tail"] and error_lines(o.detail["stderr_tail"]) == []


def test_port_taken_when_vllm_binds_fails_with_the_environment_verdict(tmp_path):
    o = faults.port_taken_during_start(tmp_path)
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    data = o.detail["result"]
    assert data["verdict"]["phase"] == "environment" and "weight_loading" not in data["phases"]
    assert any("Address already in use" in e["text"] for e in data["verdict"]["evidence"])
    assert o.survivors == [] and data["stop"]["survivors"] == []


@pytest.fixture(scope="module")
def compare_killed(tmp_path_factory):
    return faults.engine_killed_during_compare(tmp_path_factory.mktemp("compare"))


def test_engine_killed_during_compare_records_the_dead_cell_and_fails(compare_killed):
    o = compare_killed
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    (line,) = error_lines(o.detail["stderr_tail"])
    assert "the baseline server died during cell" in line and "--resume" in line
    manifest, cells = o.detail["manifest"], o.detail["cells"]
    assert (manifest["state"], manifest["reason"]) == ("failed", "baseline_server_died")
    assert cells[0]["failure"] is None and cells[0]["errors"] == 0
    dead = cells[-1]["failure"]
    assert dead["kind"] == "engine_dead" and dead["source"] == "server log" and dead["evidence"]
    assert manifest["server_deaths"]["baseline"]["cell"] == cells[-1]["label"]
    launch = o.detail["launch_manifest"]
    assert (launch["state"], launch["reason"]) == ("failed", "died_after_ready")
    assert launch["stop"]["survivors"] == [] and o.survivors == []


def test_no_request_of_the_dead_cell_is_lost(compare_killed):
    o = compare_killed
    records = o.detail["records"]
    assert o.sent == o.recorded == len(records) and o.detail["answered"] > 0
    dead_label = o.detail["cells"][-1]["label"]
    failed = [r for r in records if r["label"] == dead_label and not r["ok"]]
    assert failed and {r["error_kind"] for r in failed} <= {"engine_dead", "refused", "reset"}


# The ladder's two servers start before `served`, so that one vLLM runs at a time.
@pytest.fixture(scope="module")
def ladder_killed(tmp_path_factory):
    return faults.engine_killed_during_ladder(tmp_path_factory.mktemp("ladder"))


@pytest.fixture(scope="module")
def ladder_resumed(ladder_killed):
    return faults.resume_ladder(Path(ladder_killed.detail["workdir"]), Path(ladder_killed.detail["folder"]))


def test_engine_killed_during_ladder_records_the_dead_step_and_fails(ladder_killed):
    o = ladder_killed
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    (line,) = o.detail["error_lines"]
    assert line.startswith("oomkit: error: the server died during step concurrency: ")
    assert line.endswith(f"(the finished steps are kept; continue with --resume {o.detail['folder']})")
    manifest, steps = o.detail["manifest"], o.detail["steps"]
    assert (manifest["kind"], manifest["state"], manifest["reason"]) == ("launch", "failed", "died_after_ready")
    assert "ladder_outcome" not in manifest and manifest["stop"]["survivors"] == [] and o.survivors == []
    assert [s["name"] for s in steps] == faults.LADDER_STEPS[:5] and all(s["failure"] is None for s in steps[:4])
    dead = steps[-1]["failure"]
    assert dead["kind"] == "engine_dead" and dead["source"] == "server log" and dead["evidence"]
    assert manifest["server_death"] == {
        "step": "concurrency",
        "server_run": o.detail["folder"],
        **{k: dead[k] for k in ("kind", "phase", "reason")},
        "evidence": dead["evidence"][:3],
    }
    kept = [r["concurrency"] for r in o.detail["rungs"]]  # the rung that died is no measurement
    assert kept and kept == faults.LADDER_RUNGS[: len(kept)] and len(kept) < len(faults.LADDER_RUNGS)
    listed = o.detail["listed"]
    assert (listed["state"], listed["reason"], listed["resumable"]) == ("failed", "died_after_ready", True)
    assert listed["resume_command"].startswith(f"oomkit ladder --resume {Path(o.detail['folder']).name}")


def test_no_request_of_the_dead_ladder_is_lost(ladder_killed):
    o = ladder_killed
    records = o.detail["records"]
    assert o.sent == o.recorded == len(records) and o.detail["answered"] > 0
    died_in = faults.LADDER_RUNGS[len(o.detail["rungs"])]
    dead = [r for r in records if r["label"] == f"concurrency_c{died_in}"]
    failed = [r for r in dead if not r["ok"]]  # a request of the rung may have ended before the kill
    assert failed and {r["error_kind"] for r in failed} <= {"engine_dead", "refused", "reset"}


def test_ladder_resume_after_the_kill_sends_only_what_did_not_finish(ladder_killed, ladder_resumed):
    o = ladder_resumed
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    kept, rungs = o.detail["kept_rungs"], o.detail["all_rungs"]
    assert o.sent == o.recorded > 0 and rungs[: len(kept)] == kept and len(rungs) > len(kept)
    assert o.detail["labels"] == sorted({f"concurrency_c{c}" for c in rungs[len(kept) :]} | {"repeat"})
    manifest = o.detail["manifest"]
    assert (manifest["state"], manifest["reason"], manifest["error"], manifest["server_death"]) == (
        "complete",
        None,
        None,
        None,
    )
    assert manifest["ladder_outcome"]["stopped_at"] is None and manifest["resumes"][0]["base_url"]
    server = json.loads((Path(o.detail["server_run"]) / "manifest.json").read_text())
    assert (server["state"], server["resume_of"]) == ("complete", ladder_killed.detail["folder"])
    assert server["stop"]["survivors"] == [] and o.survivors == []
    steps = o.detail["steps"]
    assert steps[:5] == ladder_killed.detail["steps"]  # kept as they were, the dead line included
    assert [s["name"] for s in steps[5:]] == ["concurrency", "repeat"] and {s["attempt"] for s in steps[5:]} == {1}
    assert [r["concurrency"] for r in o.detail["rungs"]] == rungs
    data = o.detail["result"]
    assert data["server_died"] is False and data["stopped_at"] is None
    assert list(o.detail["listed"]) == [Path(ladder_killed.detail["folder"]).name]  # the new server is a part


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from _load_vllm import vllm_server

    with vllm_server(tmp_path_factory.mktemp("server")) as server:
        yield server


def test_resume_after_the_kill_completes_the_comparison(compare_killed, served):
    o = faults.resume_compare(
        Path(compare_killed.detail["workdir"]), Path(compare_killed.detail["compare_folder"]), served.url
    )
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    assert o.sent == o.recorded > 0
    data = o.detail["result"]
    assert [c["label"] for c in data["failed_cells"]] == [compare_killed.detail["cells"][-1]["label"]]
    assert all(c["failure"] is None for c in data["cells"]) and data["server_deaths"] == {}
    manifest = json.loads((Path(data["run_dir"]) / "manifest.json").read_text())
    assert (manifest["state"], manifest["reason"], manifest["error"]) == ("complete", None, None)


@pytest.fixture(scope="module")
def proxied(served, tmp_path_factory):
    return faults.proxy_faults(tmp_path_factory.mktemp("proxy"), served.url)


def test_5xx_and_partial_streams_of_a_real_vllm_are_recorded_with_their_class(proxied):
    for o in proxied[:2]:
        assert o.survived, (o.scenario, o.why, o.detail.get("stderr_tail"))
        assert o.sent == o.recorded == len(o.detail["records"])
    kinds = {**proxied[0].detail["kinds"], **proxied[1].detail["kinds"]}
    assert kinds == {f: faults.EXPECTED_KIND[f] for f in kinds} and len(kinds) == 7
    no_done = next(r for r in proxied[1].detail["records"] if r["ok"])
    assert no_done["output_tokens"] == 32 and no_done["finish_reason"] == "length"
    cut = [r for r in proxied[1].detail["records"] if r["error_kind"] == "reset"]
    assert all(r["http_status"] == 200 and r["chunks"] >= 1 for r in cut)


def test_a_stalled_real_stream_times_out_and_the_run_goes_on(proxied):
    o = proxied[2]
    assert o.survived, (o.why, o.detail.get("stderr_tail"))
    (rec,) = o.detail["records"]
    assert rec["error_kind"] == "timeout" and rec["error"].startswith("stalled: nothing more for 2 s")
    assert 2000 <= rec["latency_ms"] < 10_000 and rec["chunks"] >= 1
    log = o.detail["proxy_log"]
    after = log[[e["fault"] for e in log].index("stall") + 1 :]
    assert after and all(e["outcome"] for e in after)  # every later request was still sent and answered
    assert o.detail["rc"] == 0
