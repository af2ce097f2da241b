"""Which /metrics names carry each quantity, newest first (the scraper takes the first present).

Source for every entry: shared/research/vllm-internals.md §6.2 (vLLM 0.6-0.34 names as scraped,
with their history) and §5.3 (prefix-cache counters); checked against vllm/v1/metrics/loggers.py
of the installed 0.32. Counters are listed with the `_total` suffix prometheus_client exposes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str
    names: tuple[str, ...]
    kind: str  # "counter" | "gauge"
    label: str | None = None
    """Break the value down by this label (None: sum over every label set)."""
    source: str = ""


METRICS: tuple[Metric, ...] = (
    Metric(
        "kv_usage",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "gauge",
        source="§6.2: kv_cache_usage_perc since 0.10; gpu_cache_usage_perc in V0 and V1 <= 0.10",
    ),
    Metric("running", ("vllm:num_requests_running",), "gauge", source="§6.2: all versions"),
    Metric("waiting", ("vllm:num_requests_waiting",), "gauge", source="§6.2: all versions"),
    Metric(
        "waiting_by_reason",
        ("vllm:num_requests_waiting_by_reason",),
        "gauge",
        label="reason",
        source="§6.2: >= 0.22, reason capacity/deferred",
    ),
    Metric(
        "preemptions",
        ("vllm:num_preemptions_total",),
        "counter",
        source="§6.2: name stable as scraped; V1 logs no preemption line, so this is the evidence",
    ),
    Metric(
        "prefix_queries",
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "counter",
        source="§5.3: prefix_cache_* >= 0.10; gpu_prefix_cache_* in V1 0.8-0.10",
    ),
    Metric(
        "prefix_hits",
        ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "counter",
        source="§5.3, as prefix_queries",
    ),
    Metric("prompt_tokens", ("vllm:prompt_tokens_total",), "counter", source="§6.2: stable as scraped"),
    Metric("generation_tokens", ("vllm:generation_tokens_total",), "counter", source="§6.2: stable"),
    Metric("prompt_tokens_cached", ("vllm:prompt_tokens_cached_total",), "counter", source="§5.3: >= 0.17"),
    Metric(
        "requests_finished",
        ("vllm:request_success_total",),
        "counter",
        label="finished_reason",
        source="§6.2: finished_reason stop/length/abort (+error, repetition in new versions)",
    ),
)
BY_KEY = {m.key: m for m in METRICS}

# Labels that identify the server, not the quantity: dropped from stored sample keys.
IGNORED_LABELS = ("model_name",)
# Only these families are stored per scrape (the rest of /metrics is HTTP and Python runtime).
KEEP_PREFIXES = ("vllm:",)
INFO_FAMILY = "vllm:cache_config_info"
