"""`oomkit ladder`: short request, tool call, agent steps, history doubling, concurrency doubling
and bisection to the knee, repeat at temperature 0; poc.json."""

from oomkit.ladder.knee import Knee, Rung, find_knee
from oomkit.ladder.poc import build_poc
from oomkit.ladder.result import StepResult
from oomkit.ladder.run import LadderResult, ladder, run_steps
from oomkit.ladder.steps import LadderOptions

__all__ = [
    "Knee",
    "LadderOptions",
    "LadderResult",
    "Rung",
    "StepResult",
    "build_poc",
    "find_knee",
    "ladder",
    "run_steps",
]
