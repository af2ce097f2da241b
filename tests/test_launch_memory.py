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
