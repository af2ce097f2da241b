"""Failures the engine adds itself, not scanned per line: a traceback the log cuts off before its exception
line, and V0's iteration-timeout cancel (a CancelledError that only the frames above it tell from a shutdown)."""

from __future__ import annotations

from oomkit.triage.rules import Failure, rx

# Not scanned per line: the engine adds this hit when the log ends inside a traceback, before its
# exception line (an excerpt cut short, or a process killed while printing). Placed by its frames.
CUT_TRACEBACK = Failure(
    "E-CUT",
    rx(r"Traceback \(most recent call last\)"),
    "wrapper",
    None,
    False,
    9,
    "a traceback the log cuts off before its exception line",
    "Traceback (most recent call last):",
    "Python traceback header; the exception line would follow the frames",
)

# Not scanned per line: the engine adds this hit when a CancelledError ends a traceback whose innermost vLLM
# frame is V0's engine loop waiting for a step (`run_engine_loop`'s `asyncio.wait`, 0.4-0.10): that wait runs
# under `asyncio_timeout(ENGINE_ITERATION_TIMEOUT_S)`, which cancels it when the step hangs and raises
# TimeoutError ("Engine iteration timed out"); a shutdown cancels the loop task instead, logged as "Engine is
# gracefully shutting down" with no traceback.
ITERATION_CANCEL = Failure(
    "E-ITERCANCEL",
    rx(r"^(?:asyncio\.(?:exceptions\.)?)?CancelledError$"),
    "timeout",
    "timeout",
    False,
    64,
    "V0's engine loop gave up waiting for a step (ENGINE_ITERATION_TIMEOUT_S): a hang, not memory",
    "asyncio.exceptions.CancelledError",
    "vllm/engine/async_llm_engine.py (V0): run_engine_loop's asyncio.wait under asyncio_timeout",
)
