"""Server-side evidence during a load: /metrics scraped every second (standard Prometheus text
parser, current and legacy vLLM names), per-window deltas, and server memory."""

from oomkit.metrics.deltas import MetricDeltas, compute
from oomkit.metrics.memory import DcgmProbe, MemorySampler, NvmlProbe, RssProbe, choose, listening_pid
from oomkit.metrics.names import METRICS, Metric
from oomkit.metrics.scrape import Scrape, Scraper, by_label, parse, value

__all__ = [
    "DcgmProbe",
    "METRICS",
    "MemorySampler",
    "Metric",
    "MetricDeltas",
    "NvmlProbe",
    "RssProbe",
    "Scrape",
    "Scraper",
    "by_label",
    "choose",
    "compute",
    "listening_pid",
    "parse",
    "value",
]
