"""Per-run figures from cumulative counters and sampled gauges: what changed during one window
of scrapes (never the server's lifetime totals, never the log's rolling 1,000-request window)."""

from __future__ import annotations

from dataclasses import dataclass, field

from oomkit.metrics.names import BY_KEY
from oomkit.metrics.scrape import Scrape, by_label, name_used, value
from oomkit.serial import JsonObject, to_json_object

COUNTERS = (
    "preemptions",
    "prefix_queries",
    "prefix_hits",
    "prompt_tokens",
    "generation_tokens",
    "prompt_tokens_cached",
)
GAUGES = ("kv_usage", "running", "waiting")


@dataclass(frozen=True)
class MetricDeltas:
    scrapes: int
    """Successful scrapes in the window (0: the server exposes no /metrics, all figures None)."""
    preemptions: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    prefix_cache_hit_rate: float | None = None
    """Δhits / Δqueries in tokens over the window; None when nothing was queried."""
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prompt_tokens_cached: float | None = None
    max_kv_usage: float | None = None
    max_running: float | None = None
    max_waiting: float | None = None
    max_waiting_by_reason: dict[str, float] = field(default_factory=dict)
    requests_by_finish_reason: dict[str, float] = field(default_factory=dict)
    counter_reset: bool = False
    """A counter went down: the server restarted inside the window (deltas count from the reset)."""
    names: dict[str, str] = field(default_factory=dict)
    """Evidence: the metric name each figure was read from."""

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


def counter_delta(values: list[float | None]) -> tuple[float | None, bool]:
    """Sum of increases; a drop means a restart, after which the new value is all increase."""
    seen = [v for v in values if v is not None]
    if not seen:
        return None, False
    total, reset = 0.0, False
    for prev, cur in zip(seen, seen[1:], strict=False):
        if cur >= prev:
            total += cur - prev
        else:
            total += cur
            reset = True
    return total, reset


def _labelled_delta(scrapes: list[Scrape], key: str) -> tuple[dict[str, float], bool]:
    series = [by_label(s, key) for s in scrapes]
    labels = sorted({k for d in series if d for k in d})
    out, reset = {}, False
    for lv in labels:
        # A label value that appears mid-window started from 0 (the family was there without it).
        delta, r = counter_delta([None if d is None else d.get(lv, 0.0) for d in series])
        reset = reset or r
        if delta:
            out[lv] = delta
    return out, reset


def _max(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return max(seen) if seen else None


def compute(scrapes: list[Scrape]) -> MetricDeltas:
    ok = [s for s in scrapes if s.error is None]
    if not ok:
        return MetricDeltas(scrapes=0)
    figures: dict[str, float | None] = {}
    reset = False
    for key in COUNTERS:
        figures[key], r = counter_delta([value(s, key) for s in ok])
        reset = reset or r
    for key in GAUGES:
        figures[f"max_{key}"] = _max([value(s, key) for s in ok])
    waiting: dict[str, float] = {}
    for s in ok:
        for reason, v in (by_label(s, "waiting_by_reason") or {}).items():
            waiting[reason] = max(waiting.get(reason, 0.0), v)
    finished, r = _labelled_delta(ok, "requests_finished")
    queries, hits = figures["prefix_queries"], figures["prefix_hits"]
    rate = hits / queries if queries and hits is not None else None
    names = {k: n for k in BY_KEY if (n := next((name_used(s, k) for s in ok if name_used(s, k)), None))}
    return MetricDeltas(
        scrapes=len(ok),
        prefix_cache_hit_rate=rate,
        max_waiting_by_reason=waiting,
        requests_by_finish_reason=finished,
        counter_reset=reset or r,
        names=names,
        **figures,
    )
