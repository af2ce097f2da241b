"""Whether a memory error with CUDA graphs already captured and no ready line is V1's sampler
warm-up: V1 (0.8 on) captures the graphs in the worker's compile_or_warm_up_model and then warms
the sampler up at max_num_seqs dummy requests (gpu_worker.py), still inside the engine's start-up.
Three things in a log say the error came there rather than while serving: the failing process's
innermost vLLM frame is the sampler's, a traceback (often the engine's, beside the worker's OOM) is in
compile_or_warm_up_model (called, or sent to the workers by name through collective_rpc), or the
engine reports that its start-up failed."""

from __future__ import annotations

from oomkit.triage.engine import Triage
from oomkit.triage.rules import rx
from oomkit.triage.state import Hit

STARTUP_FAILED = rx(
    r"Engine core initialization failed|EngineCore failed to start|WorkerProc failed to start"
    r"|WorkerProc initialization failed|Engine process failed to start"
)
"""What vLLM's V1 engine logs or raises when its start-up did not complete (v1/engine/core.py
run_engine_core, v1/engine/utils.py wait_for_engine_startup, v1/executor/multiproc_executor.py)."""

WARMUP_FRAME = "::compile_or_warm_up_model"
"""A frame of that name in the frame stacks triage keeps ("path::function", "rpc::method")."""


def warmup_evidence(t: Triage, hit: Hit, hits: list[Hit]) -> str | None:
    """Why the error is in the sampler warm-up rather than serving, or None."""
    if _in_sampler(t, hit):
        return "the failing frames are the sampler's"
    if any(frame.endswith(WARMUP_FRAME) for stack in t.state.frames.values() for frame in stack):
        return "a traceback is in the workers' compile_or_warm_up_model"
    failed = next((h for h in hits if not h.after_ready and STARTUP_FAILED.search(h.evidence.text)), None)
    if failed is not None:
        return f"the engine reports its start-up failed (line {failed.evidence.line})"
    return None


def _in_sampler(t: Triage, hit: Hit) -> bool:
    """The failing process's innermost vLLM frame is V1's sampler (vllm/v1/sample/)."""
    stack = t.state.frames.get(hit.pid) or t.state.frames.get(None) or []
    inner = next((frame for frame in reversed(stack) if "/vllm/" in frame), "")
    return "/vllm/v1/sample/" in inner
