"""The ladder's steps before its concurrency rungs, replayed unrecorded so that the prefix cache and
the clock reach the first rung as a ladder's do (oomkit.ladder.steps): agent_steps, session 0's
steps in order; then history_doubling, session 0's last step with its history sent 1, 2, 4, ...
times, until vLLM refuses the prompt as too long or the doublings run out. On a small KV pool the
doubled histories evict blocks the rungs would otherwise hit."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from oomkit.forecast.lanes import Lane
from oomkit.forecast.router import DpRouter
from oomkit.forecast.simulate import Budget, Rung
from oomkit.forecast.steptime import StepTimeModel
from oomkit.forecast.traffic import AgentStep, Traffic

MAX_HISTORY_DOUBLINGS = 6
"""`oomkit ladder --max-history-doublings` default: factors 1, 2, 4, ..., 64."""


@dataclass
class HistoryDoubling(Rung):
    """One agent sending session 0's last step with its history x1, x2, x4, ...; the first request
    vLLM refuses ends it (a failed request ends its session), as it ends the ladder's step."""

    def _request(self, agent: int, k: int) -> tuple[list[int], AgentStep]:
        tokens = self.agents[agent]
        last = len(tokens.shape.steps) - 1
        return tokens.scaled_prompt(last, 2**k), tokens.shape.steps[last]


def warm_up(
    lanes: list[Lane],
    router: DpRouter,
    lockstep: bool,
    traffic: Traffic,
    model: StepTimeModel,
    head: array[int],
    steps: int,
    budget: Budget,
) -> float:
    """Runs agent_steps and history_doubling on the engines; the simulated time they end."""
    agent = Rung(lanes, router, lockstep, traffic, model, head, 1, steps, {}, 0.0)
    agent.run(budget, "warmup")
    doubling = HistoryDoubling(
        lanes, router, lockstep, traffic, model, head, 1, MAX_HISTORY_DOUBLINGS + 1, {}, agent.now_s
    )
    doubling.run(budget, "history")
    return doubling.now_s
