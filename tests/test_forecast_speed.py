"""The forecast's speed and memory cuts at production scale (issue 17, "Scale") change no figure:
prompt ids taken from the session's previous prompt equal the ids mapped afresh, inter-token
latencies counted per value give the percentiles of the listed values, the garbage collector paused
while a rung steps is left as found, and a whole forecast with the cuts equals one without them. Runs vLLM's scheduler (no server); skips when vLLM is absent."""

from __future__ import annotations

import gc
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("vllm.v1.core.sched.scheduler")

from oomkit.forecast import ForecastRequest, forecast, heap, simulate  # noqa: E402
from oomkit.forecast.counts import percentile_of_counts  # noqa: E402
from oomkit.forecast.heap import PacedCollection  # noqa: E402
from oomkit.forecast.layouts import parse_layouts  # noqa: E402
from oomkit.forecast.tokens import SessionTokens, ids_of, session_tokens, shared_head  # noqa: E402
from oomkit.forecast.traffic import load_traffic  # noqa: E402
from oomkit.loadrun.stats import percentile  # noqa: E402
from oomkit.plan import PlanRequest  # noqa: E402

REQUEST_SET = Path(__file__).parent / "fixtures" / "decide" / "ladder-small-kv" / "request-set.jsonl"
# Histories that grow by 40-80 tokens a step, 64 tokens out: on 60 blocks of 16 several sessions
# preempt each other, and some prefixes hit.
WORKLOAD = {
    "name": "forecast-speed-test",
    "seed": 5,
    "sessions": 6,
    "steps": 4,
    "system_instruction_tokens": 100,
    "format_rules_tokens": 20,
    "user_task_tokens": [10, 30],
    "workflow_metadata_tokens": 10,
    "output_tokens": [16, 64],
    "ignore_eos": True,
    "tools": {"count": 0},
    "history": {"assistant_action_tokens": [5, 20], "tool_result_tokens": [20, 60]},
}


def _workload(tmp_path: Path) -> str:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump(WORKLOAD), encoding="utf-8")
    return str(path)


def _fresh_prompt(tokens: SessionTokens, step: int) -> list[int]:
    """The prompt of `step` from a session object that has built no prompt before: every id mapped."""
    fresh = session_tokens(tokens.traffic, tokens.index, tokens.shared_head)
    fresh._grow_to(step)
    return fresh.prompt(step)


@pytest.mark.parametrize("source", ["workload", "request set"])
def test_prompt_ids_taken_from_the_previous_prompt_equal_ids_mapped_afresh(tmp_path, source):
    traffic = load_traffic(str(REQUEST_SET) if source == "request set" else _workload(tmp_path))
    head = shared_head(traffic)
    for index in range(min(3, len(traffic.sessions))):
        tokens = session_tokens(traffic, index, head)
        steps = len(tokens.shape.steps)
        for k in range(steps):
            assert tokens.prompt(k) == _fresh_prompt(tokens, k)
            assert tokens.last_ids_history > len(head)  # the next prompt takes these from here
        tokens.release()
        assert tokens.last_ids == [] and len(tokens.history) == 0
        assert tokens.prompt(steps - 1) == _fresh_prompt(tokens, steps - 1)  # rebuilt after release


def test_the_history_doubling_prompt_is_unchanged_by_the_reuse(tmp_path):
    traffic = load_traffic(_workload(tmp_path))
    tokens = session_tokens(traffic, 0, shared_head(traffic))
    last = len(tokens.shape.steps) - 1
    first = tokens.scaled_prompt(last, 1)
    doubled = tokens.scaled_prompt(last, 2)
    end = len(tokens.history)
    assert first == _fresh_prompt(tokens, last) and doubled[:end] == first[:end]
    assert doubled[-(len(first) - end) :] == first[end:] and len(doubled) > len(first)


def test_percentiles_of_counted_values_equal_those_of_the_listed_values():
    rng = random.Random(17)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.choice([0.25, 1.5, 3.0, rng.random() * 50]) for _ in range(n)]
        counts = Counter(values)
        for q in (0, 5, 50, 95, 99, 100):
            assert percentile_of_counts(counts, q) == percentile(values, q), (n, q)
    assert percentile_of_counts(Counter(), 50) is None


def _listed_percentile(counts: Counter[float], q: float) -> float | None:
    return percentile(list(counts.elements()), q)


@contextmanager
def _automatic_collection() -> Iterator[PacedCollection]:
    yield PacedCollection(enabled=False)  # the collector as the caller left it, never paused


def _without_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every prompt's ids mapped afresh, ITL percentiles over the listed values, automatic GC."""
    monkeypatch.setattr(SessionTokens, "_ids", lambda self, codes: ids_of(codes))
    monkeypatch.setattr(simulate, "percentile_of_counts", _listed_percentile)
    monkeypatch.setattr(simulate, "paced_collection", _automatic_collection)


def _figures(req: ForecastRequest) -> list[Any]:
    return [
        {**lay.to_dict(), "rungs": [{**r.to_dict(), "wall_s": 0} for r in lay.rungs]} for lay in forecast(req).layouts
    ]


def test_a_forecast_with_the_cuts_equals_one_without_them(tmp_path, monkeypatch):
    """Rungs with preemptions and prefix hits, then sessions spread over a window (per-minute
    figures), then two DP layouts in lockstep: every figure equal, to the last bit."""
    wl = _workload(tmp_path)
    small = PlanRequest(model="llama-3.1-8b", gpu="H100", block_size=16, max_model_len=512, num_gpu_blocks_override=60)
    dep = PlanRequest(model="deepseek-v3.2", gpu="H200", max_model_len=2048, kv_cache_memory_bytes=256 << 20)
    requests = [
        ForecastRequest(plan=small, workload=wl, concurrency=(1, 4, 8)),
        ForecastRequest(plan=small, workload=wl, sessions=6, window_s=20.0),
        ForecastRequest(plan=dep, workload=wl, concurrency=(8, 32), refine=False, layouts=parse_layouts("tp8,dep8")),
    ]
    with monkeypatch.context() as m:
        m.setattr(heap, "COLLECT_EVERY_STEPS", 200)  # paced collections inside these short rungs
        fast = [_figures(req) for req in requests]
    with monkeypatch.context() as m:
        _without_cuts(m)
        slow = [_figures(req) for req in requests]
    rungs = [r for figures in fast for lay in figures for r in lay["rungs"]]
    assert any(r["preemptions"] for r in rungs) and any(r["prefix_hit_rate"] for r in rungs)
    assert any(r.get("minutes") for r in rungs) and all(r["itl_ms_p95"] is not None for r in rungs)
    assert fast == slow


def test_collection_pauses_while_a_rung_steps_and_is_left_as_found(monkeypatch):
    monkeypatch.setattr(heap, "COLLECT_EVERY_STEPS", 2)
    collected: list[int] = []
    monkeypatch.setattr(heap.gc, "collect", lambda: collected.append(1) or 0)
    assert gc.isenabled()
    with heap.paced_collection() as pace:
        assert not gc.isenabled()
        for _ in range(5):
            pace.step()
    assert gc.isenabled() and len(collected) == 2  # at steps 2 and 4
    gc.disable()
    try:
        with heap.paced_collection() as pace:
            pace.step()
            pace.step()
        assert not gc.isenabled() and len(collected) == 2  # the caller had it off: left off, no collection
    finally:
        gc.enable()
