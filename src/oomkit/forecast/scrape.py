"""What a /metrics scraper would read of vLLM's KV-cache usage gauge during a rung.

vLLM sets `vllm:kv_cache_usage_perc` from each step's SchedulerStats (the usage after that step),
and `oomkit ladder` and `oomkit bench` read /metrics once a second (oomkit.metrics.scrape.Scraper),
plus once when a rung's window opens and once when it closes. A peak that lasts a step or two (a
prefill chunk, a block boundary in mamba align mode, the last steps before a request finishes) is
seen only when a scrape happens to fall on it. The forecast's `max_kv_usage` is the peak of every
step; `max_kv_usage_sampled` is what such a scraper reads: the highest of its readings during the
rung, averaged over where its one-second ticks fall relative to the rung (PHASES offsets), because a
real scraper's offset is arbitrary."""

from __future__ import annotations

from dataclasses import dataclass, field

SCRAPE_INTERVAL_S = 1.0
"""oomkit's /metrics scrape interval during load (Load's scrape_interval_s)."""
PHASES = 10
"""Tick offsets averaged over: 0, 0.1, ..., 0.9 of the interval after the rung starts."""


@dataclass
class GaugeScrapes:
    """The readings of PHASES scrapers, each polling every SCRAPE_INTERVAL_S from its own offset."""

    start_s: float
    highest: list[float] = field(default_factory=list)
    """Per offset: the highest reading so far (the window-open reading included)."""
    next_tick: int = 0

    @classmethod
    def opened(cls, start_s: float, gauge: float) -> GaugeScrapes:
        """The window opens: every scraper reads the gauge as it is then."""
        return cls(start_s, [gauge] * PHASES)

    def due(self, t_s: float) -> bool:
        """A tick falls before t_s: read_until has something to read."""
        return self._tick_s(self.next_tick) < t_s

    def read_until(self, t_s: float, gauge: float) -> None:
        """Every tick before t_s reads `gauge`: the value the last step before it set."""
        while self._tick_s(self.next_tick) < t_s:
            offset = self.next_tick % PHASES
            self.highest[offset] = max(self.highest[offset], gauge)
            self.next_tick += 1

    def closed(self, end_s: float, gauge: float) -> float:
        """The window closes at end_s with the gauge at `gauge`: the expected highest reading."""
        self.read_until(end_s, gauge)
        return sum(max(h, gauge) for h in self.highest) / PHASES

    def _tick_s(self, tick: int) -> float:
        return self.start_s + tick * SCRAPE_INTERVAL_S / PHASES
