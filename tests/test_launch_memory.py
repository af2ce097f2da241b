"""The launch memory sampler samples each phase change at once, not only every interval: a startup
phase shorter than the interval (the testbed's weight loading, ~0.5 s) still gets its own peak."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from oomkit.fsio import JsonlWriter, read_jsonl
from oomkit.launch.memory import MemorySampler, ProcessTree

pytest.importorskip("psutil")


def wait_for(condition, timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.01)


def test_every_phase_change_is_sampled_before_the_interval(tmp_path: Path) -> None:
    phases = ["environment", "weight_loading", "memory_profiling", "kv_cache_allocation"]
    current: list[str | None] = [None]
    path = tmp_path / "memory.jsonl"
    # An interval far longer than the test: any sample after the first comes from a phase change.
    sampler = MemorySampler(ProcessTree(os.getpid()), JsonlWriter(path), lambda: current[0], interval_s=600).start()
    try:
        wait_for(lambda: "starting" in sampler.peaks.rss_bytes, what="the first sample")
        for phase in phases:
            current[0] = phase
            wait_for(lambda p=phase: p in sampler.peaks.rss_bytes, what=f"a sample in {phase}")
    finally:
        sampler.stop()
    assert list(sampler.peaks.primary()) == ["starting", *phases]
    assert all(v > 10_000_000 for v in sampler.peaks.primary().values())  # this process's RSS
    assert [r["phase"] for r in read_jsonl(path)] == [None, *phases] and sampler.samples == len(phases) + 1


def test_a_reported_phase_change_wakes_a_sampler_that_no_longer_polls(tmp_path: Path) -> None:
    """Once told of phase changes (the launcher's log follower calls `phase_changed`), the sampler sleeps whole
    intervals instead of polling twenty times a second, and a reported change is still sampled at once."""
    current: list[str | None] = [None]
    sampler = MemorySampler(
        ProcessTree(os.getpid()), JsonlWriter(tmp_path / "memory.jsonl"), lambda: current[0], interval_s=600
    ).start()
    try:
        wait_for(lambda: sampler.samples == 1, what="the first sample")
        sampler.phase_changed()  # told once: from now on it waits a whole interval between reads
        time.sleep(0.3)
        for phase in ("weight_loading", "kv_cache_allocation"):
            current[0] = phase
            sampler.phase_changed()
            wait_for(lambda p=phase: p in sampler.peaks.rss_bytes, timeout_s=2.0, what=f"a sample in {phase}")
    finally:
        sampler.stop()
    assert sampler.samples == 3


def test_between_scans_a_sample_reads_the_processes_already_known(tmp_path: Path) -> None:
    import subprocess

    tree = ProcessTree(os.getpid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid not in [p.pid for p in tree.known()]  # not scanned yet
        assert child.pid in [p.pid for p in tree.live()]  # a scan finds it, and it is known from then on
        assert child.pid in [p.pid for p in tree.known()]
    finally:
        child.kill()
        child.wait()
