"""poc.json: the proof-of-concept criteria a ladder establishes, and what it leaves untested."""

from __future__ import annotations

from typing import TypedDict

from oomkit.ladder.result import ContextLimit, StepResult
from oomkit.loadrun.knee import Knee
from oomkit.serial import JsonObject

# Scenarios a ladder run never covers (why each matters for memory, as our own notes).
NEVER_TESTED = (
    (
        "hours of sustained traffic",
        "fragmentation, slow leaks and prefix-cache churn show up over hours, a ladder runs minutes",
    ),
    ("open-loop arrivals (bursts)", "the ladder is closed-loop: a burst can queue more requests than any rung"),
    ("many distinct sessions evicting the prefix cache", "the rungs reuse the request set's few sessions"),
)


class Poc(TypedDict):
    """poc.json (and ladder.json's `poc`): decide and report read it back by these keys."""

    short_request_stable: bool
    tool_calling_valid: bool
    repeat_run_identical: bool
    context_limit_found: bool
    context_limit_tokens: int | None
    peak_memory_recorded: bool
    peak_memory_bytes: int | None
    knee: JsonObject | None
    untested: list[str]


STEP_NAMES = ("short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat")


def build_poc(
    steps: dict[str, StepResult],
    knee: Knee | None,
    context: ContextLimit,
    memory_source: str | None,
    max_concurrency: int,
    stopped_at: str | None,
) -> Poc:
    """`steps`: step name -> its result (only the steps that ran)."""
    short, tool, repeat = steps.get("short_request"), steps.get("tool_call"), steps.get("repeat")
    peaks = [s.peak_memory_bytes for s in steps.values() if s.peak_memory_bytes is not None]
    identical = repeat.detail.get("identical_by_step") if repeat else None
    repeat_short = isinstance(identical, dict) and bool(identical.get("short_request"))
    untested = [
        f"step {name} (not reached: the ladder stopped at {stopped_at})" if stopped_at else f"step {name}"
        for name in STEP_NAMES
        if name not in steps
    ]
    if tool is not None and tool.detail.get("skipped"):
        untested.append("tool calling (the workload defines no tools)")
    if knee is not None and knee.reason == "limit":
        untested.append(f"concurrency above {max_concurrency} (no knee up to --max-concurrency)")
    if steps.get("history_doubling") and not context.get("found"):
        untested.append(
            f"prompts longer than {context.get('largest_ok_prompt_tokens')} tokens "
            "(the doubling stopped at its limit before the context did)"
        )
    if not peaks:
        untested.append(f"server memory ({memory_source or 'not measured'})")
    elif memory_source and memory_source.startswith("RSS"):
        untested.append("GPU memory (measured the server's RSS: the CPU backend)")
    untested += [f"{name}: {why}" for name, why in NEVER_TESTED]
    return {  # a Poc, keys in poc.json's order
        "short_request_stable": bool(short and short.ok and repeat_short),
        "tool_calling_valid": bool(tool and tool.ok and not tool.detail.get("skipped")),
        "repeat_run_identical": bool(repeat and repeat.ok),
        "context_limit_found": bool(context.get("found")),
        "context_limit_tokens": context.get("limit_tokens"),
        "peak_memory_recorded": bool(peaks),
        "peak_memory_bytes": max(peaks) if peaks else None,
        "knee": knee.to_dict() if knee else None,
        "untested": untested,
    }
