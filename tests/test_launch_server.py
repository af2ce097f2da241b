"""`oomkit launch` with the real vLLM CPU engine and the testbed profiles in examples/.

Four server starts in all, one per scenario (module-scoped): healthy (library context manager),
KV too small (CLI --check --json), budget too high (library check), never ready (CLI foreground
with a tiny start timeout). The module holds /tmp/oomkit-vllm.lock: one vLLM server at a time on
this machine.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import yaml

from oomkit.fsio import read_jsonl
from oomkit.launch import check_profile, launched

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMELINE = (
    "environment",
    "distributed_init",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "ready",
    "serving",
)


LOCK = "/tmp/oomkit-vllm.lock"


@pytest.fixture(scope="module", autouse=True)
def one_vllm_at_a_time() -> Iterator[None]:
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def oomkit(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oomkit", *args], capture_output=True, text=True, timeout=timeout_s)


def gone(pids: list[int]) -> list[int]:
    """The pids of `pids` that are still alive (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def listening(pids: list[int]) -> dict[int, list[tuple[str, int]]]:
    """The TCP/UDP addresses each process of the tree listens on (UDP: bound)."""
    out: dict[int, list[tuple[str, int]]] = {}
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        out[pid] = [tuple(c.laddr[:2]) for c in conns if c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE)]
    return out


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    import httpx

    runs = tmp_path_factory.mktemp("runs")
    with launched(EXAMPLES / "testbed-healthy.yaml", runs_dir=runs) as server:
        tree = [server.pid, *[p.pid for p in psutil.Process(server.pid).children(recursive=True)]]
        reply = httpx.post(
            server.base_url + "/v1/chat/completions",
            trust_env=False,
            timeout=60,
            json={
                "model": server.model_ids[0],
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "alpha beta"}],
            },
        )
        during = SimpleNamespace(
            alive=server.alive(),
            triage=server.triage(),
            base_url=server.base_url,
            log_exists=server.log_path.is_file(),
            listening=listening(tree),
            masks=thread_masks(tree),
        )
    return SimpleNamespace(result=server.result, tree=tree, reply=reply, during=during)


def thread_masks(pids: list[int]) -> dict[int, tuple[str, set[frozenset[int]]]]:
    """Per process: its title and the distinct CPU masks of its threads."""
    out: dict[int, tuple[str, set[frozenset[int]]]] = {}
    for pid in pids:
        try:
            title = " ".join(psutil.Process(pid).cmdline())
            out[pid] = (title, {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")})
        except (psutil.NoSuchProcess, OSError):
            continue
    return out


def test_healthy_start_is_ready_with_phases_in_order(healthy: SimpleNamespace) -> None:
    result = healthy.result
    assert result.ready and result.state == "complete" and result.verdict["phase"] == "healthy"
    phases = [p.phase for p in result.phases]
    assert {"environment", "weight_loading", "kv_cache_allocation", "ready"} <= set(phases)
    assert [TIMELINE.index(p) for p in phases] == sorted(TIMELINE.index(p) for p in phases)
    assert healthy.during.alive and healthy.during.log_exists
    assert healthy.during.base_url.startswith("http://127.0.0.1:")
    assert healthy.reply.status_code == 200 and healthy.reply.json()["usage"]["completion_tokens"] > 0
    assert result.figures["kv_cache_tokens"] == 65536  # 64 MiB at 1 KiB per token


def test_the_engine_core_is_pinned_beside_its_worker(healthy: SimpleNamespace) -> None:
    # examples/testbed-healthy.yaml sets engine_core_cpus: [0] (oomkit.launch.affinity says why):
    # every thread of the EngineCore runs on core 0 while serving; the API server keeps its mask.
    manifest = json.loads((healthy.result.run_dir / "manifest.json").read_text())
    pinning = manifest["engine_core_cpus"]
    engines = [pid for pid, (title, _) in healthy.during.masks.items() if "::EngineCore" in title]
    assert pinning["not_applied"] is None and pinning["cpus"] == [0]
    assert pinning["pids"] == engines and pinning["threads"] >= 2
    assert healthy.during.masks[engines[0]][1] == {frozenset({0})}
    assert healthy.during.masks[healthy.tree[0]][1] == {frozenset(os.sched_getaffinity(0))}


def test_the_launched_server_listens_on_loopback_only(healthy: SimpleNamespace) -> None:
    # examples/testbed-healthy.yaml sets no host: the API server, and every process under it, is
    # reachable from this machine only.
    port = int(healthy.during.base_url.rsplit(":", 1)[1])
    api = healthy.during.listening[healthy.tree[0]]
    assert ("127.0.0.1", port) in api
    assert {addr for addrs in healthy.during.listening.values() for addr, _ in addrs} <= {"127.0.0.1", "::1"}


def peaks_agree_with_the_samples(run_dir: str | Path, peaks: dict[str, int], phases: list[str]) -> None:
    """The peak per phase is the largest sample of memory.jsonl in that phase, and the samples
    follow the phase timeline in order. Which short phases got a sample depends on the machine's
    load, so this checks what was sampled, not that a given short phase was."""
    samples = read_jsonl(Path(run_dir, "memory.jsonl"))
    labels = [s["phase"] or "starting" for s in samples]
    assert samples and set(peaks) == set(labels) and set(labels) <= {"starting", *phases}
    assert peaks == {p: max(s["rss_bytes"] for s, q in zip(samples, labels, strict=True) if q == p) for p in peaks}
    order = ["starting", *TIMELINE]
    assert [order.index(q) for q in labels] == sorted(order.index(q) for q in labels)


def test_healthy_start_records_peak_memory_per_phase(healthy: SimpleNamespace) -> None:
    result, peaks = healthy.result, healthy.result.peak_memory_bytes
    assert result.memory_source == "rss"
    peaks_agree_with_the_samples(result.run_dir, peaks, [p.phase for p in result.phases])
    # API server + EngineCore + Worker of the tiny model: about 1.9 GiB RSS at ready (cpu-testbed.md §10).
    # "ready" lasts only until the fixture's request, but "serving" lasts through the stop as well.
    at_ready = max(peaks.get("ready", 0), peaks.get("serving", 0))
    assert 1.0 * 2**30 < at_ready < 4 * 2**30
    assert peaks["environment"] < at_ready  # vLLM imported, no model yet: seconds long on any machine


def test_clean_stop_leaves_no_surviving_process(healthy: SimpleNamespace) -> None:
    stop = healthy.result.stop
    assert len(healthy.tree) >= 3  # API server, EngineCore, Worker (+ resource tracker)
    assert gone(healthy.tree) == [] and gone(list(stop.seen_pids)) == []
    assert stop.requested and stop.survivors == () and stop.signals[0] == "SIGTERM"
    assert "SIGKILL-group" not in stop.signals and stop.killed_pids == ()
    manifest = json.loads((healthy.result.run_dir / "manifest.json").read_text())
    assert manifest["state"] == "complete" and manifest["stop"]["survivors"] == []
    assert manifest["overhead"]["ratio"] < 0.05


@pytest.fixture(scope="module")
def kv_too_small(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    runs = tmp_path_factory.mktemp("runs")
    done = oomkit("launch", str(EXAMPLES / "testbed-kv-too-small.yaml"), "--check", "--json", "--runs-dir", str(runs))
    return SimpleNamespace(done=done, data=json.loads(done.stdout))


def test_kv_too_small_fails_as_kv_cache_allocation_with_the_estimate(kv_too_small: SimpleNamespace) -> None:
    done, data = kv_too_small.done, kv_too_small.data
    assert done.returncode == 1, done.stderr[-2000:]
    assert data["ready"] is False and data["healthy"] is False and data["reason"] == "exited_before_ready"
    assert data["verdict"]["phase"] == "kv_cache_allocation" and data["verdict"]["is_oom"] is True
    assert data["figures"]["estimated_max_model_len"] == 1792  # (15 blocks - 1 null block) x 128
    assert "kv_cache_allocation" in data["phases"] and data["request"] is None
    assert data["stop"]["survivors"] == [] and gone(data["stop"]["seen_pids"]) == []
    peaks_agree_with_the_samples(data["run_dir"], data["peak_memory_bytes"], data["phases"])
    # the tree held vLLM and the loaded model before it failed: hundreds of MiB, not a bare Python
    assert 2**28 < max(data["peak_memory_bytes"].values()) < 4 * 2**30
    assert "kv_cache_allocation" in done.stderr  # phases were printed live
    assert json.loads(Path(data["run_dir"], "manifest.json").read_text())["state"] == "failed"


def test_budget_too_high_fails_with_its_own_verdict(tmp_path_factory: pytest.TempPathFactory) -> None:
    checked = check_profile(EXAMPLES / "testbed-budget-too-high.yaml", runs_dir=tmp_path_factory.mktemp("runs"))
    result = checked.launch
    assert not checked.healthy and not result.ready and result.reason == "exited_before_ready"
    assert result.verdict["phase"] == "environment" and result.verdict["cause"] == "E-STARTFREE"
    assert result.figures["gpu_memory_utilization"] == 0.99
    assert "weight_loading" not in [p.phase for p in result.phases]  # fails before the model loads
    assert result.stop.survivors == () and gone(list(result.stop.seen_pids)) == []


def test_never_ready_times_out_and_the_group_is_stopped(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "testbed-healthy.yaml").read_text())
    data["start_timeout_s"] = 8  # vLLM needs ~30 s here
    profile = tmp_path / "never-ready.yaml"
    profile.write_text(yaml.safe_dump(data))
    began = time.monotonic()
    done = oomkit("launch", str(profile), "--json", "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert time.monotonic() - began < 60
    result = json.loads(done.stdout)
    assert result["reason"] == "start_timeout" and result["ready"] is False and result["state"] == "failed"
    assert len(result["stop"]["seen_pids"]) >= 1 and result["stop"]["survivors"] == []
    assert gone(result["stop"]["seen_pids"]) == []
