"""Target load against one server (`oomkit bench`): N concurrent agent sessions on the shared load
engine (oomkit.loadrun), with client figures, /metrics deltas, peak memory, agent-loop success and
goodput; `--clients` streams from client processes or Ray actors into the one run folder."""

from oomkit.bench.run import BenchOptions, BenchResult, bench, run_load

__all__ = [
    "BenchOptions",
    "BenchResult",
    "bench",
    "run_load",
]
