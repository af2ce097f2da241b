"""/metrics parsing (current and legacy vLLM names), per-window deltas, the 1 s scraper, memory."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest
from _load_fake_server import FakeOpenAI
from conftest import CPU_LOGS, need

from oomkit.metrics import MemorySampler, RssProbe, Scraper, by_label, choose, compute, listening_pid, parse, value
from oomkit.metrics.deltas import counter_delta
from oomkit.metrics.memory import DcgmProbe
from oomkit.metrics.scrape import Scrape


def test_real_vllm_scrape_after_pressure():
    s = parse(need(CPU_LOGS / "metrics_after_pressure_long.txt").read_text())
    # cpu-testbed.md §4: 24 requests, 35 preemptions, all finished by length.
    assert value(s, "preemptions") == 35.0
    assert by_label(s, "requests_finished")["length"] == 24.0
    assert set(by_label(s, "waiting_by_reason")) == {"capacity", "deferred"}
    assert s.info["num_gpu_blocks"] == "12" and s.info["block_size"] == "128"
    assert not any(k.endswith("_bucket") or "model_name" in k for k in s.samples)


def test_real_vllm_prefix_counters():
    s = parse(need(CPU_LOGS / "metrics_after_prefix_and_tools.txt").read_text())
    assert value(s, "prefix_queries") > value(s, "prefix_hits") > 0


def test_legacy_names_are_read_through_aliases():
    fake = FakeOpenAI(legacy_metrics=True)
    fake.active, fake.kv_capacity = 1, 4
    fake.counters.update(queries=100, hits=40)
    s = parse(fake.metrics_text())
    assert value(s, "kv_usage") == 0.25 and value(s, "prefix_hits") == 40
    assert "vllm:gpu_cache_usage_perc" in "".join(s.samples)


def scrape(t: float, **vals: float) -> Scrape:
    names = {
        "preemptions": "vllm:num_preemptions_total",
        "hits": "vllm:prefix_cache_hits_total",
        "queries": "vllm:prefix_cache_queries_total",
        "kv": "vllm:kv_cache_usage_perc",
        "waiting": 'vllm:num_requests_waiting_by_reason{reason="capacity"}',
    }
    return Scrape(t, {names[k]: v for k, v in vals.items()})


def test_deltas_are_per_window_with_gauge_maxima():
    d = compute(
        [
            scrape(0, preemptions=10, hits=100, queries=400, kv=0.1, waiting=0),
            scrape(1, preemptions=12, hits=150, queries=500, kv=1.0, waiting=6),
            scrape(2, preemptions=15, hits=200, queries=600, kv=0.5, waiting=1),
        ]
    )
    assert d.preemptions == 5 and d.prefix_hits == 100 and d.prefix_queries == 200
    assert d.prefix_cache_hit_rate == 0.5 and d.max_kv_usage == 1.0
    assert d.max_waiting_by_reason == {"capacity": 6} and not d.counter_reset
    assert d.names["preemptions"] == "vllm:num_preemptions_total"


def test_counter_drop_is_a_restart():
    assert counter_delta([10, 12, 3, 5]) == (2 + 3 + 2, True)
    assert counter_delta([None, None]) == (None, False)
    assert compute([scrape(0, preemptions=5), scrape(1, preemptions=1)]).counter_reset


def test_no_metrics_means_unknown_not_zero():
    d = compute([Scrape(0, {}, error="HTTP 404")])
    assert d.scrapes == 0 and d.preemptions is None and d.prefix_cache_hit_rate is None
    assert compute([scrape(0, kv=0.2)]).preemptions is None  # the family is absent


async def until(condition, timeout_s: float = 20.0) -> None:
    """Wait for a condition, not a fixed time: a loaded machine scrapes later, not less."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the scraper"
        await asyncio.sleep(0.02)


def test_scraper_polls_every_interval_and_survives_errors():
    with FakeOpenAI() as fake:
        lines: list[dict] = []

        async def go():
            async with httpx.AsyncClient() as http:
                s = Scraper(http, fake.url, lines.append, interval_s=0.1, label=lambda: "step")
                s.start()
                await until(lambda: sum("error" not in x for x in lines) >= 3)
                fake.metrics_enabled = False
                await until(lambda: any("error" in x for x in lines))  # a failed scrape is a line, not a crash
                await s.stop()
                return s

        s = asyncio.run(go())
    good = [x for x in lines if "error" not in x]
    assert len(good) >= 3 and any("error" in x for x in lines) and s.available
    assert good[0]["label"] == "step" and s.info["block_size"] == "16"


def test_rss_of_a_process_tree_and_the_listening_pid():
    probe = RssProbe(os.getpid())
    reading = asyncio.run(probe.read())
    assert reading[f"pid{os.getpid()}"] > 10 * 2**20
    with FakeOpenAI() as fake:
        assert listening_pid(fake.url) == os.getpid()
        chosen, why = choose("rss", None, fake.url)
        assert isinstance(chosen, RssProbe) and "RSS" in why
    assert listening_pid("http://10.1.2.3:8000") is None
    assert choose("rss", None, "http://10.1.2.3:8000")[0] is None
    assert choose("auto", None, "http://10.1.2.3:8000")[0] is None  # never this host's GPUs for a remote server
    assert choose("none", 1, "http://127.0.0.1:1")[0] is None


def test_sampler_keeps_a_peak_per_label():
    class Steps:
        source = "test"
        values = iter([100, 300, 200, 50])

        async def read(self):
            return {"gpu0": next(self.values)}

    label = ["a"]
    s = MemorySampler(Steps(), label=lambda: label[0])

    async def go():
        await s.sample_now()
        await s.sample_now()
        label[0] = "b"
        await s.sample_now()
        await s.sample_now()

    asyncio.run(go())
    assert s.peaks == {"a": 300, "b": 200} and s.samples == 4


def test_dcgm_exporter_framebuffer_in_mib():
    text = (
        '# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1"} 1024\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-2"} 2048\n'
    )
    transport = httpx.MockTransport(lambda req: httpx.Response(200, text=text))
    probe = DcgmProbe("http://dcgm:9400/metrics", httpx.AsyncClient(transport=transport))
    assert asyncio.run(probe.read()) == {"gpu0": 1024 * 2**20, "gpu1": 2048 * 2**20}


@pytest.mark.parametrize("memory", ["http://127.0.0.1:9400/metrics"])
def test_choose_a_dcgm_url(memory):
    probe, why = choose(memory, None, "http://10.0.0.1:8000")
    assert isinstance(probe, DcgmProbe) and memory in why


def test_the_series_kept_in_memory_is_compact_and_gives_the_same_figures():
    """The scraper keeps every scrape of a window in memory; a bench of hours must not grow by the
    full /metrics text each second (benchmarks/long_run.py measures the slope)."""
    from oomkit.metrics.deltas import compute
    from oomkit.metrics.scrape import compact, parse

    text = (CPU_LOGS / "metrics_after_pressure_long.txt").read_text()
    full = [parse(text, float(t), "bench") for t in range(3)]
    small = [compact(s) for s in full]
    assert compute(small) == compute(full) and compute(full).prompt_tokens is not None
    assert all(not s.info and len(s.samples) < len(f.samples) / 3 for s, f in zip(small, full, strict=False))
