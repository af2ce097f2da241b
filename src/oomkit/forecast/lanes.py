"""The engines of one layout as the forecast's clock sees them: one lane per DP engine, each with
vLLM's own scheduler, the time its next step starts, and what the router sent it since its last
step boundary. Engines of a dense model run independently; the engines of a mixture-of-experts model
step in lockstep (vllm/v1/engine/core.py: DP of an MoE model runs DPEngineCoreProc, whose idle
ranks run a dummy batch so every step's expert all-to-all meets), so their steps last as long as
the slowest rank's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from oomkit.forecast.engine import Engine
from oomkit.forecast.router import Counts


@dataclass
class Lane:
    index: int
    engine: Engine
    clock_s: float = 0.0
    """When this engine's next step starts (or, idle, the last time it was busy)."""
    pending: list[Any] = field(default_factory=list)
    """Requests routed to it that join its scheduler at the next step boundary, as the engine
    core reads its input queue between steps."""
    parked: bool = False
    """It scheduled nothing: it waits for a new request instead of stepping again."""
    waiting: int = 0
    """Its waiting requests after the last step (SchedulerStats: waiting + skipped waiting)."""
    kv_usage: float = 0.0
    """Its KV-cache usage after its last step (SchedulerStats.kv_cache_usage: its /metrics gauge)."""
    before: Counts = (0, 0, 0.0)
    after: Counts = (0, 0, 0.0)
    step_end_s: float = -math.inf

    @property
    def scheduler(self) -> Any:
        return self.engine.scheduler

    def busy(self) -> bool:
        return bool(self.pending) or bool(self.scheduler.has_requests())

    def idle(self) -> bool:
        """Nothing for its scheduler: an engine core then does not call it (EngineCore.step returns
        early unless has_requests(); an idle DP rank of a lockstep group runs a dummy batch)."""
        return not self.scheduler.has_requests()

    def unfinished(self) -> bool:
        return bool(self.scheduler.get_num_unfinished_requests())

    def counts(self) -> Counts:
        """What the engine publishes to the DP coordinator (_maybe_publish_request_counts)."""
        running, waiting = self.scheduler.get_request_counts()
        return int(waiting), int(running), float(self.scheduler.get_kv_cache_usage())

    def counts_at(self, t_s: float) -> Counts:
        """Published before the step in flight, or after it once it has ended."""
        return self.after if t_s >= self.step_end_s else self.before

    def join_pending(self) -> None:
        for request in self.pending:
            self.scheduler.add_request(request)
        self.pending.clear()
        self.before = self.counts()


def groups_of(lanes: list[Lane], lockstep: bool) -> list[list[Lane]]:
    """Lanes that step together: all of them in lockstep, else each alone."""
    return [lanes] if lockstep and len(lanes) > 1 else [[lane] for lane in lanes]


def group_clock(group: list[Lane]) -> float:
    return max(lane.clock_s for lane in group)


def runnable(group: list[Lane]) -> bool:
    return any(lane.busy() for lane in group) and not all(lane.parked for lane in group)


def wake(group: list[Lane], at_s: float) -> None:
    """A request is routed into this group at at_s: an idle or parked group starts stepping then.
    Call before the request joins `pending`."""
    if not any(lane.busy() for lane in group) or all(lane.parked for lane in group):
        for lane in group:
            lane.clock_s = max(lane.clock_s, at_s)
    for lane in group:
        lane.parked = False
