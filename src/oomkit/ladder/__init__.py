"""`oomkit ladder`: short request, tool call, agent steps, history doubling, concurrency doubling
and bisection to the knee (oomkit.loadrun.knee), repeat at temperature 0; poc.json."""

from oomkit.ladder.poc import build_poc
from oomkit.ladder.result import StepResult
from oomkit.ladder.run import LadderResult, ladder, run_steps
from oomkit.ladder.steps import LadderOptions

__all__ = [
    "LadderOptions",
    "LadderResult",
    "StepResult",
    "build_poc",
    "ladder",
    "run_steps",
]
