"""Noise-aware verdicts: per metric, a variant is better or worse than the baseline only when the
ranges of their repeats do not overlap and the medians differ by more than the metric's minimum
effect; otherwise it is inconclusive (or the same, when every repeat gave the same value)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from oomkit.compare.document import CellDoc, Judgement, MetricKey, MetricVerdictDoc

Better = Literal["lower", "higher"]
LOWER: Final = "lower"
HIGHER: Final = "higher"


@dataclass(frozen=True)
class Metric:
    key: MetricKey
    better: Better
    """lower or higher is better."""
    unit: str
    min_effect: float
    """Relative difference of medians below which a non-overlapping pair is still inconclusive."""
    label: str
    source: str


# Minimum effects are oomkit's choice: timing on a shared machine moves by a few percent between
# identical runs (cpu-testbed.md §10 restarts: 54-58 s for the same start), counts do not.
METRICS: tuple[Metric, ...] = (
    Metric("peak_memory_bytes", LOWER, "bytes", 0.01, "peak memory", "server memory sampler (RSS or NVML)"),
    Metric("max_kv_usage", LOWER, "fraction", 0.02, "KV cache usage (max)", "vllm:kv_cache_usage_perc"),
    Metric(
        "prefix_cache_hit_rate",
        HIGHER,
        "fraction",
        0.02,
        "prefix-cache hit rate",
        "Δvllm:prefix_cache_hits / Δvllm:prefix_cache_queries over the cell",
    ),
    Metric("ttft_ms_p95", LOWER, "ms", 0.05, "TTFT p95", "client: first streamed token"),
    Metric("latency_ms_p95", LOWER, "ms", 0.05, "response time p95", "client: last token of a request"),
    Metric("session_ms_p95", LOWER, "ms", 0.05, "agent loop time p95", "client: first request to last token"),
    Metric("preemptions", LOWER, "count", 0.0, "preempted sequences", "Δvllm:num_preemptions_total"),
    Metric("errors", LOWER, "count", 0.0, "errors", "client: failed requests"),
    Metric("agent_success_share", HIGHER, "fraction", 0.0, "agent loops succeeded", "client: sessions"),
)
BY_KEY = {m.key: m for m in METRICS}
VERDICTS: tuple[Judgement, ...] = ("better", "worse", "same", "inconclusive", "unmeasured")


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    verdict: Judgement
    baseline: tuple[float, ...]
    variant: tuple[float, ...]
    delta: float | None
    """Median of the variant minus median of the baseline (metric units)."""
    delta_pct: float | None
    reason: str

    def to_dict(self) -> MetricVerdictDoc:
        return {
            "metric": self.metric,
            "verdict": self.verdict,
            "baseline": list(self.baseline),
            "variant": list(self.variant),
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "reason": self.reason,
        }


def _values(cells: Sequence[CellDoc], key: MetricKey) -> tuple[float, ...]:
    return tuple(float(v) for c in cells if (v := c.get(key)) is not None)


def judge(metric: Metric, base: tuple[float, ...], var: tuple[float, ...]) -> MetricVerdict:
    if not base or not var:
        return MetricVerdict(
            metric.key,
            "unmeasured",
            base,
            var,
            None,
            None,
            "no value in " + ("the baseline" if not base else "the variant"),
        )
    mb, mv = statistics.median(base), statistics.median(var)
    delta = mv - mb
    pct = (delta / mb * 100.0) if mb else None
    if set(base) == set(var) and len(set(base)) == 1:
        return MetricVerdict(metric.key, "same", base, var, 0.0, 0.0, "every repeat gave the same value")
    if min(var) <= max(base) and min(base) <= max(var):
        return MetricVerdict(
            metric.key,
            "inconclusive",
            base,
            var,
            delta,
            pct,
            f"repeat ranges overlap: baseline {_range(base)}, variant {_range(var)}",
        )
    scale = max(abs(mb), abs(mv))
    if scale and abs(delta) / scale < metric.min_effect:
        return MetricVerdict(
            metric.key,
            "inconclusive",
            base,
            var,
            delta,
            pct,
            f"difference {abs(delta) / scale:.1%} is below the {metric.min_effect:.0%} minimum effect",
        )
    good = (delta < 0) == (metric.better == LOWER)
    single = " (1 repeat each: spread not measured)" if len(base) < 2 or len(var) < 2 else ""
    return MetricVerdict(
        metric.key,
        "better" if good else "worse",
        base,
        var,
        delta,
        pct,
        f"ranges apart: baseline {_range(base)}, variant {_range(var)}{single}",
    )


def _range(values: tuple[float, ...]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.4g}" if lo == hi else f"{lo:.4g}..{hi:.4g}"


def compare_modes(cells: Sequence[CellDoc], baseline: str, variant: str) -> list[MetricVerdict]:
    """Every metric of one variant against the baseline, from the cells of both."""
    base = [c for c in cells if c["mode"] == baseline]
    var = [c for c in cells if c["mode"] == variant]
    return [judge(m, _values(base, m.key), _values(var, m.key)) for m in METRICS]
