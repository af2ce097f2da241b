"""Per-minute figures of a `--sessions N --window W` forecast: how load builds up and drains over the
simulated window (sessions start spread over it), the figures a dashboard shows a minute at a time.
A rung of closed-loop agents (`--concurrency`) has no time axis a user set, so it has none.

Each figure is put in the minute of the virtual clock when vLLM's scheduler produced it: a finished
request (its TTFT, latency and preemptions) in the minute it finished, a step's KV usage, waiting
requests and prefix-cache queries in the minute the step ended."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from oomkit.loadrun.stats import percentile
from oomkit.serial import JsonObject, to_json_object

MINUTE_S = 60.0


@dataclass(frozen=True)
class MinuteForecast:
    minute: int
    """Minutes since the rung started (0 is the first)."""
    requests: int
    """Requests that ended in this minute (finished or failed)."""
    errors: int
    preemptions: int
    """Preemptions of the requests that finished in this minute."""
    max_kv_usage: float
    waiting_max: int
    prefix_hit_rate: float | None
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    latency_ms_p95: float | None
    output_tokens: int

    def to_dict(self) -> JsonObject:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in to_json_object(self).items()}


@dataclass
class _Minute:
    requests: int = 0
    errors: int = 0
    preemptions: int = 0
    max_kv_usage: float = 0.0
    waiting_max: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    output_tokens: int = 0
    ttft_ms: array[float] = field(default_factory=lambda: array("d"))
    latency_ms: array[float] = field(default_factory=lambda: array("d"))

    def result(self, minute: int) -> MinuteForecast:
        return MinuteForecast(
            minute=minute,
            requests=self.requests,
            errors=self.errors,
            preemptions=self.preemptions,
            max_kv_usage=self.max_kv_usage,
            waiting_max=self.waiting_max,
            prefix_hit_rate=self.prefix_hits / self.prefix_queries if self.prefix_queries else None,
            ttft_ms_p50=percentile(self.ttft_ms, 50),
            ttft_ms_p95=percentile(self.ttft_ms, 95),
            latency_ms_p95=percentile(self.latency_ms, 95),
            output_tokens=self.output_tokens,
        )


@dataclass
class MinuteTally:
    """The rung's figures bucketed by minute of the virtual clock from `start_s`."""

    start_s: float
    buckets: dict[int, _Minute] = field(default_factory=dict)

    def at(self, now_s: float) -> _Minute:
        minute = max(0, int((now_s - self.start_s) // MINUTE_S))
        bucket = self.buckets.get(minute)
        if bucket is None:
            bucket = self.buckets[minute] = _Minute()
        return bucket

    def step(self, now_s: float, kv_usage: float, waiting: int, queries: int, hits: int) -> None:
        m = self.at(now_s)
        m.max_kv_usage = max(m.max_kv_usage, kv_usage)
        m.waiting_max = max(m.waiting_max, waiting)
        m.prefix_queries += queries
        m.prefix_hits += hits

    def finished(self, now_s: float, ttft_ms: float, latency_ms: float, preemptions: int) -> None:
        m = self.at(now_s)
        m.requests += 1
        m.preemptions += preemptions
        m.ttft_ms.append(ttft_ms)
        m.latency_ms.append(latency_ms)

    def failed(self, now_s: float) -> None:
        m = self.at(now_s)
        m.requests += 1
        m.errors += 1

    def tokens(self, now_s: float, count: int) -> None:
        self.at(now_s).output_tokens += count

    def results(self) -> tuple[MinuteForecast, ...]:
        """Every minute from the first to the last, quiet minutes included (all zero)."""
        if not self.buckets:
            return ()
        last = max(self.buckets)
        return tuple(self.buckets.get(m, _Minute()).result(m) for m in range(last + 1))
