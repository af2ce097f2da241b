"""The data-parallel front-end's choice of engine, as the installed vLLM 0.32 makes it.

vLLM's API server sends each request to one of the DP engines with
`DPLBAsyncMPClient.get_core_engine_for_request` (vllm/v1/engine/core_client.py). For each engine,
scanning from a start index that rotates by one per request:

    score = max(client_count x this client's unfinished requests on it, waiting + running)
    if waiting: score += waiting x 6 x max(0, kv_cache_usage - 0.5)

and the lowest score wins (the first in scan order on a tie). `waiting`, `running` and
`kv_cache_usage` are the DP coordinator's snapshot (vllm/v1/engine/coordinator.py,
DPCoordinatorProc: published at most every 100 ms while they change), made from each engine's
`Scheduler.get_request_counts()` and `get_kv_cache_usage()` around every step
(EngineCoreProc._maybe_publish_request_counts). Between snapshots the client adds client_count to
the chosen engine's waiting count, so a burst spreads. This module re-states that arithmetic (it is
the front-end's, not the scheduler's, and runs in the API server process, which the forecast does
not start); the engines it routes to are vLLM's own schedulers."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

STATS_INTERVAL_S = 0.1
"""DPCoordinatorProc's min_stats_update_interval_ms (100): how stale the router's counts may be."""
KV_PENALTY = 6.0
KV_PENALTY_FROM = 0.5
"""A waiting queue costs 0 at <= 50% KV usage, up to 3x waiting at 100% (core_client.py)."""

Counts = tuple[int, int, float]
"""(waiting, running, kv_cache_usage) of one engine, as the coordinator carries them."""


@dataclass
class DpRouter:
    """One API server (client_count 1, client_index 0) in front of `engines` DP engines."""

    engines: int
    client_count: int = 1
    start_index: int = 0
    """eng_start_index: engines x client_index // client_count, then +1 per routed request."""
    inflight: list[int] = field(default_factory=list)
    snapshot: list[list[float]] = field(default_factory=list)
    next_publish_s: float = -math.inf

    def __post_init__(self) -> None:
        self.inflight = self.inflight or [0] * self.engines
        self.snapshot = self.snapshot or [[0, 0, 0.0] for _ in range(self.engines)]

    def route(self, now_s: float, counts: Callable[[int], Counts]) -> int:
        """The engine for a request arriving at now_s; counts(i) is engine i's published state."""
        if self.engines == 1:
            self.inflight[0] += 1
            return 0
        if now_s >= self.next_publish_s:  # the coordinator's next publication has come
            self.snapshot = [list(counts(i)) for i in range(self.engines)]
            self.next_publish_s = (math.floor(now_s / STATS_INTERVAL_S) + 1) * STATS_INTERVAL_S
        best, best_score = 0, float(sys.maxsize)
        for i in range(self.engines):
            idx = (self.start_index + i) % self.engines
            waiting, running, usage = self.snapshot[idx]
            score = max(self.client_count * self.inflight[idx], waiting + running)
            if waiting:
                score += waiting * KV_PENALTY * max(0.0, usage - KV_PENALTY_FROM)
            if score < best_score:
                best, best_score = idx, score
        self.snapshot[best][0] += self.client_count
        self.start_index = (self.start_index + 1) % self.engines
        self.inflight[best] += 1
        return best

    def finished(self, engine: int) -> None:
        """A request routed to `engine` finished or was aborted (process_engine_outputs)."""
        self.inflight[engine] -= 1
