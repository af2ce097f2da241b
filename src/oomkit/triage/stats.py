"""The periodic stats lines: their fields, and the running aggregates the cache-pressure rule reads."""

from __future__ import annotations

import re

from oomkit.triage.model import Evidence, StatsSummary

R = re.compile
STATS_HEAD = R(
    r"^(?:Engine (?P<eng>\d{3})|(?P<n>\d+) Engines Aggregated): (?P<rest>.*)$|^(?P<v0>Avg prompt throughput: .*)$"
)
# The rest of a stats line hard-wrapped at a fixed width (a terminal's or an issue box's; a docker-timestamped line
# then goes on on the next line with no log header): from the cut field's last letters on, it carries the fields the
# cache-pressure rule reads (Running, Waiting, KV cache usage); read as a sample when it shows pressure
# (`FactCollector._wrapped_stats`).
WRAPPED_STATS = R(
    r"^[a-z]{0,30}(?:: [\d.]+ (?:tokens/s|reqs|%), )?"
    r"(?P<rest>(?:Running|Waiting|Pending|Swapped|Preemptions|GPU KV|CPU KV|KV)\b.*KV cache usage: [\d.]+%.*)$"
)
STATS_FIELD = R(r"(?P<k>[A-Za-z][A-Za-z ]*?): (?P<v>[\d.]+)\s*(?:tokens/s|reqs|%)?")
STATS_NAMES = {
    "Avg prompt throughput": "prompt_tps",
    "Avg generation throughput": "generation_tps",
    "Running": "running",
    "Waiting": "waiting",
    "Pending": "waiting",
    "Swapped": "swapped",
    "Preemptions": "preemptions",
    "GPU KV cache usage": "kv_usage_pct",
    "CPU KV cache usage": "kv_usage_pct",  # the CPU backend's device; V0 on GPU prints both (GPU wins)
    "KV cache usage": "kv_usage_pct",
    "Prefix cache hit rate": "prefix_hit_pct",
}

FULL_KV_PCT = 95.0  # issue 13: KV usage >= 95% with requests waiting is cache pressure
SATURATED_KV_PCT = 99.0
# The log's last stats line, read on its own (low confidence): the cache nearly full (vLLM preempts at
# 100%, so a server that stops here is at the edge), or requests still queued with most of the cache in
# use (V1's scheduler admits a waiting request only when it can allocate the KV blocks of its prompt).
NEAR_FULL_KV_PCT = 90.0
QUEUED_KV_PCT = 75.0


class StatsAggregate:
    """Running aggregates of the periodic stats lines (constant memory on any log size) plus the
    recent samples that the cache-pressure rule looks at."""

    RECENT = 12

    def __init__(self) -> None:
        self.samples = 0
        self.max: dict[str, float] = {}
        self.max_evidence: dict[str, Evidence] = {}
        self.preemptions = 0.0
        self.last: dict[str, float] = {}
        self.recent: list[tuple[dict[str, float], Evidence]] = []
        self.full_samples = 0  # KV cache nearly full while requests wait
        self.saturated_samples = 0  # KV cache at 99%+ while requests wait: admission is KV-bound
        self.full_evidence: list[Evidence] = []

    def add(self, sample: dict[str, float], ev: Evidence) -> None:
        self.samples += 1
        if sample.get("kv_usage_pct", 0.0) >= FULL_KV_PCT and sample.get("waiting", 0.0) > 0:
            self.full_samples += 1
            self.saturated_samples += sample.get("kv_usage_pct", 0.0) >= SATURATED_KV_PCT
            if len(self.full_evidence) < 3:
                self.full_evidence.append(ev)
        for k, v in sample.items():
            if v > self.max.get(k, float("-inf")):
                self.max[k], self.max_evidence[k] = v, ev
        self.preemptions += sample.get("preemptions", 0.0)
        self.last = sample
        self.recent.append((sample, ev))
        del self.recent[: -self.RECENT]

    def add_bulk(self, count: int, peaks: dict[str, float]) -> None:
        """Stats lines the reader counted without reading one by one (the prefilter reads every one
        that can be full or preempting, so these only add samples and may raise a peak)."""
        self.samples += count
        for name, peak in peaks.items():
            if peak > self.max.get(name, float("-inf")):
                self.max[name] = peak
                self.max_evidence.pop(name, None)  # the peak's line was counted, not read

    def summary(self) -> StatsSummary:
        if not self.samples:
            return StatsSummary()
        return {
            "samples": self.samples,
            "max_kv_usage_pct": self.max.get("kv_usage_pct"),
            "max_running": self.max.get("running"),
            "max_waiting": self.max.get("waiting"),
            "preemptions": self.preemptions,
            "full_kv_samples": self.full_samples,
            "last_prefix_hit_pct": self.last.get("prefix_hit_pct"),
            "last": self.last,
        }
