"""Target load against one server (`oomkit bench`), and the engine the ladder shares: streaming
client, /metrics every second, server memory, run-folder records."""

from oomkit.bench.engine import Load, SessionOutcome, Window
from oomkit.bench.failure import Failure, classify
from oomkit.bench.prepare import TargetSpec, open_target, request_set_for
from oomkit.bench.progress import NoProgress, Progress
from oomkit.bench.run import AgentStats, BenchOptions, BenchResult, bench, run_load
from oomkit.bench.stats import ClientStats, parse_slos, percentile, summarise
from oomkit.bench.target import Target, url_target

__all__ = [
    "AgentStats",
    "BenchOptions",
    "BenchResult",
    "ClientStats",
    "Failure",
    "Load",
    "NoProgress",
    "Progress",
    "SessionOutcome",
    "Target",
    "TargetSpec",
    "Window",
    "bench",
    "classify",
    "open_target",
    "parse_slos",
    "percentile",
    "request_set_for",
    "run_load",
    "summarise",
    "url_target",
]
