"""How sure an explicit failure line is, and where it lands when the line alone would misplace it: a wait that
may still end, a collective that timed out, a compile error nothing places, a custom all-reduce that failed while
CUDA graphs were captured."""

from __future__ import annotations

from oomkit.triage.failures_network import CUSTOM_ALLREDUCE
from oomkit.triage.rules import rx
from oomkit.triage.state import Hit

# PyTorch's NCCL watchdog aborts a collective that ran past its timeout (ProcessGroupNCCL::WorkNCCL::checkTimeout),
# and a point-to-point wait gives up the same way: a rank that never joined the collective (a hung or desynchronised
# rank) reads exactly as a stalled link, so the message places the failure in the network only as the likelier cause.
COLLECTIVE_TIMEOUT = rx(
    r"Watchdog caught collective operation timeout|Timed out waiting \d+ms for (?:send|recv) operation"
)
COLLECTIVE_TIMEOUT_WHY = (
    "explicit E-NCCL line, a collective that timed out: a hung rank that never joined it reads the same as a "
    "stalled link"
)
# V1 compiles the model on its first forward pass, the profiling run's dummy batch (vllm/compilation/backends.py
# "Compiling a graph for dynamic shape"), then warms up and captures the compiled sizes, and recompiles while serving
# only for a shape it has not seen. A compile error before the server is ready is the compile-and-capture step failing
# (the phase vocabulary files torch.compile warm-up with graph capture), whichever dummy run triggered it.
COMPILE_WHY = (
    "explicit E-COMPILE line before the server was ready: torch.compile and graph capture are one start-up step"
)
# vLLM's custom all-reduce opens its IPC buffers when the distributed group starts, then registers the buffers of
# every captured graph (CustomAllreduce.capture -> register_graph_buffers,
# vllm/distributed/device_communicators/custom_all_reduce.py). Its CUDACHECK failing once start-up has reached
# graph capture, or the profiling pass (which captures graphs to measure them since CUDA-graph memory profiling),
# is the capture failing (e.g. expandable segments' VMM buffers refused by cudaIpcGetMemHandle), not the link.
CAPTURING = ("cudagraph_capture", "memory_profiling")
CUSTOM_ALLREDUCE_WHY = (
    "explicit custom all-reduce error once start-up captures graphs (capture or CUDA-graph memory profiling): "
    "registering the captured graphs' buffers failed"
)

# A kernel crash (illegal access, device assert, segfault) inside a start-up step's frames is that step failing, as
# the corpus files a failure in profiling or graph capture whatever its kind; after the ready line it stays a crash.
STEPS = ("weight_loading", "memory_profiling", "kv_cache_allocation", "cudagraph_capture")
KERNEL_CRASH_WHY = "explicit E-ILLEGAL line inside a start-up step's frames: the step crashed (not memory)"


def explicit(hit: Hit) -> tuple[str | None, str, str]:
    """The phase (None: place it by context), confidence and reason of an explicit failure line."""
    rule = hit.rule
    if hit.from_raise:
        return (
            rule.phase,
            "medium",
            f"the traceback is cut before its exception line; its innermost frame raises {rule.id}'s error",
        )
    if rule.cls == "stall":  # nothing failed yet: the log ends while it waits
        return rule.phase, "medium", f"the log ends in the wait {rule.id} names, with no later start-up line"
    if rule.id == "E-NCCL" and CUSTOM_ALLREDUCE.search(hit.evidence.text):
        if hit.context_phase in CAPTURING and hit.context_source in ("frames", "markers"):
            return "cudagraph_capture", "medium", CUSTOM_ALLREDUCE_WHY
    if rule.id == "E-NCCL" and COLLECTIVE_TIMEOUT.search(hit.evidence.text):
        return rule.phase, "medium", COLLECTIVE_TIMEOUT_WHY
    if rule.id == "E-ILLEGAL" and not hit.after_ready and hit.context_source == "frames" and hit.context_phase in STEPS:
        return hit.context_phase, "medium", KERNEL_CRASH_WHY
    if rule.id == "E-SIGBUS" and hit.context_source == "frames" and hit.context_phase == "weight_loading":
        return (
            "weight_loading",
            "medium",
            "explicit E-SIGBUS line in the loader's frames: a memory-mapped checkpoint cut short",
        )
    if rule.id == "E-MMDUMMY" and hit.after_ready:  # a request's own input, which the engine serves on past
        return "not_oom_other", "medium", "explicit E-MMDUMMY line after the server was ready: one request's input"
    if rule.id == "E-COMPILE" and not hit.after_ready:
        placed = hit.context_source in ("frames", "markers") and hit.context_phase not in (None, "serving", "ready")
        return "cudagraph_capture", "medium" if placed else "low", COMPILE_WHY
    if rule.id == "E-RPCUTIL":  # the cause is the worker's traceback, which follows the line (often cut)
        return rule.phase, "low", "explicit E-RPCUTIL line: the weight-sync communicator is the likeliest call"
    if rule.id == "E-SIGNATURE":
        return (
            rule.phase,
            "medium",
            "explicit E-SIGNATURE line: a call that does not fit the installed release's signature",
        )
    return rule.phase, "high", f"explicit {rule.id} line"
