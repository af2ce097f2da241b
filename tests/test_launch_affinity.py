"""`engine_core_cpus`: the EngineCore processes of a server's tree get the mask, nothing else does,
and a mask that cannot be applied is a reason in the record, never an error. Real processes: a
`sleep` renamed with `exec -a` carries the title vLLM's EngineCore sets (VLLM::EngineCore)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from oomkit.errors import InputError
from oomkit.launch.affinity import pin_engine_cores
from oomkit.launch.profile import parse_profile

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux CPU masks")


@pytest.fixture
def spawn() -> Iterator:
    started: list[subprocess.Popen[bytes]] = []

    def start(title: str) -> psutil.Process:
        proc = subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 30'])
        started.append(proc)
        ps = psutil.Process(proc.pid)
        for _ in range(200):  # until exec has replaced bash
            if ps.cmdline()[:1] == [title]:
                break
            time.sleep(0.01)
        return ps

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_only_engine_cores_get_the_mask(spawn) -> None:
    core = min(os.sched_getaffinity(0))
    engine, engine_dp, api = spawn("VLLM::EngineCore"), spawn("VLLM::EngineCore_DP1"), spawn("python api_server")
    before = os.sched_getaffinity(api.pid)
    pinning = pin_engine_cores([api, engine, engine_dp], (core,))
    assert pinning.reason is None and pinning.pids == (engine.pid, engine_dp.pid) and pinning.threads == 2
    assert os.sched_getaffinity(engine.pid) == {core} == os.sched_getaffinity(engine_dp.pid)
    assert os.sched_getaffinity(api.pid) == before
    assert pinning.to_dict() == {"cpus": [core], "pids": [engine.pid, engine_dp.pid], "threads": 2, "not_applied": None}


def test_a_core_this_host_lacks_is_a_reason_and_nothing_is_pinned(spawn) -> None:
    engine = spawn("VLLM::EngineCore")
    before = os.sched_getaffinity(engine.pid)
    absent = max(os.cpu_count() or 1, *os.sched_getaffinity(0)) + 64
    pinning = pin_engine_cores([engine], (absent,))
    assert pinning.pids == () and f"[{absent}] are not available here" in (pinning.reason or "")
    assert os.sched_getaffinity(engine.pid) == before


def test_no_engine_core_in_the_tree_is_a_reason(spawn) -> None:
    pinning = pin_engine_cores([spawn("python -m vllm.entrypoints.openai.api_server")], (0,))
    assert pinning.pids == () and "no EngineCore process" in (pinning.reason or "")


def test_a_process_gone_is_skipped(spawn) -> None:
    engine = spawn("VLLM::EngineCore")
    engine.kill()
    engine.wait(5)
    assert pin_engine_cores([engine], (min(os.sched_getaffinity(0)),)).pids == ()


@pytest.mark.parametrize("value", ["[]", "[-1]", "[0, 0]", "zero"])
def test_the_profile_refuses_a_bad_core_list(value: str) -> None:
    with pytest.raises(InputError, match="engine_core_cpus"):
        parse_profile(f"model: m\nengine_core_cpus: {value}\n")


def test_the_profile_keeps_a_core_list() -> None:
    assert parse_profile("model: m\nengine_core_cpus: [0, 1]\n").engine_core_cpus == [0, 1]
    assert parse_profile("model: m\n").engine_core_cpus is None
