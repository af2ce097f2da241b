"""The phase a traceback's frames give (the decision order's first step, `frames`): hand rules first
(`frames.py`), then the knowledge mined from vLLM's source (`knowledge_rules.py`). A pure function of
the frames, so a traceback built from vLLM's own call paths can be checked against it
(tests/test_triage_frames_source.py)."""

from __future__ import annotations

import re

from oomkit.triage.frames import (
    DECODE_FRAME,
    DECODE_PATH,
    ENV_FRAME,
    FRAME_PHASES,
    PREFILL_FRAME,
    PREFILL_PATH,
    REPLY_WAIT_FRAME,
    SHARED_STARTUP_FRAMES,
    is_serving_frame,
)
from oomkit.triage.knowledge_rules import module_phase, source_frames_phase

V1_SAMPLER = "/vllm/v1/sample/"
COLLECTIVE_FRAME = re.compile(r"/torch/distributed/(?:distributed_c10d|c10d_logger)\.py::")
# CPython's import system: importlib.import_module and the frozen bootstrap's frames (_find_and_load, exec_module,
# _call_with_frames_removed), as tracebacks print them
IMPORT_MACHINERY = re.compile(
    r"^<frozen importlib\._bootstrap(?:_external)?>::|/importlib/__init__\.py::import_module$"
)


def stack_phase(stack: list[str], memory: bool = False, answered: bool = False) -> str | None:
    """`stack`: frames as "path::function", outermost first. `memory`: the failure is a memory error,
    which an installation frame does not place. `answered`: the failure line is a worker's answer to the
    call the stack waits in ("Worker failed with error ..."), so the wait ended, and did not time out."""
    if len(stack) >= 2 and all(frame.endswith("::<module>") for frame in stack[-2:]):
        return "environment"  # raised while importing: the installation, not a start-up step
    if importing_vllm(stack) or imported_in_a_function(stack):
        return "environment"  # what importing vLLM runs (a library's decorator, its init) failed below its modules
    if stack and IMPORT_MACHINERY.search(stack[-1]):
        return "environment"  # cut inside Python's import of a module (vllm's lazy __getattr__, the model registry's)
    if stack and not memory and ENV_FRAME.search(stack[-1]):
        return "environment"  # a backend refused the GPU or settings, or a kernel's JIT build failed
    if stack and not memory and COLLECTIVE_FRAME.search(stack[-1]):
        # cut, or raised, inside torch.distributed's collective or process-group call (all_reduce, barrier, send,
        # init_process_group, through c10d_logger's wrapper): the ranks failed to communicate, whichever step called it
        return "network_communication"
    if stack and REPLY_WAIT_FRAME.search(stack[-1]) and not (memory or answered):
        return "timeout"  # it ends waiting for a worker that never answered
    named = [f for f in stack if library_frame(f)]
    startup = [p for f in named for pat, p in FRAME_PHASES if pat.search(f.rsplit("::", 1)[-1]) or pat.search(f)]
    if not startup and (
        shared := [p for f in stack for pat, p in SHARED_STARTUP_FRAMES if pat.search(f.rsplit("::", 1)[-1])]
    ):
        # A helper several steps run: a caller (a frame outside it) that vLLM's source names as a step's
        # root tells which (`_warmup_and_capture` -> `_dummy_run` is graph capture), else the hand rule's default.
        first = next(
            i for i, f in enumerate(stack) if any(pat.search(f.rsplit("::", 1)[-1]) for pat, _ in SHARED_STARTUP_FRAMES)
        )
        known = source_frames_phase(stack[:first])
        return known if known not in (None, "serving") else shared[-1]
    if startup:
        # Distributed set-up that fails inside vllm/distributed (NCCL, custom all-reduce) is the
        # network, not the device: vLLM's source places those frames there.
        if startup[-1] == "distributed_init" and source_frames_phase(stack) == "network_communication":
            return "network_communication"
        return startup[-1]
    if any(is_serving_frame(f) and not f.endswith("::<module>") for f in stack):
        return "serving"  # a module's body runs when it is imported, whatever the module serves
    if sampler_only(stack):
        # V1's sampler runs in start-up's sampler warm-up (gpu_model_runner `_dummy_sampler_run`) as in every serving
        # step: with no caller in the stack, its frames place nothing; markers or other processes' frames may.
        return None
    return source_frames_phase(stack)


def importing_vllm(stack: list[str]) -> bool:
    """The innermost two of vLLM's frames are module bodies: vLLM was being imported, whatever ran below them."""
    vllm = [frame for frame in stack if "/vllm/" in frame or "/vllm_" in frame]
    return len(vllm) >= 2 and all(frame.endswith("::<module>") for frame in vllm[-2:])


def imported_in_a_function(stack: list[str]) -> bool:
    """The innermost frame is one of vLLM's module bodies, run by an import inside a function (vLLM's CLI imports its
    sub-commands in `main`): the installation failed to import. Not a program's main module, which runpy runs, and
    whose body may be the whole server."""
    if len(stack) < 2 or not stack[-1].endswith("::<module>") or not ("/vllm/" in stack[-1] or "/vllm_" in stack[-1]):
        return False
    return "/runpy.py::" not in stack[-2] and not stack[-2].startswith("<frozen runpy>")


def library_frame(frame: str) -> bool:
    """A frame of vLLM, a vLLM plugin (vllm_ascend, vllm-omni) or an installed package, or one the engine names
    itself (`worker::init_device`, `rpc::load_model`), not of the user's own script: an application's
    `load_model` wraps whichever vLLM step failed, and names none."""
    path = frame.rsplit("::", 1)[0].lower()
    if "/" not in path and "\\" not in path:
        return True
    return "vllm" in path or "site-packages" in path or "dist-packages" in path or "/lib/python" in path


def sampler_only(stack: list[str]) -> bool:
    """Every vLLM frame of the stack is V1's sampler's (vllm/v1/sample/): no caller names the step."""
    vllm = [f for f in stack if "/vllm/" in f]
    return bool(vllm) and all(V1_SAMPLER in f for f in vllm)


def step_kind(frames: list[str], msg: str, batch: str | None, last_stats: dict[str, float] | None) -> str | None:
    """The failing step's kind, prefill or decode: from its frames' function names (a path such as vllm/spec_decode/
    says nothing of the step's kind), then the failed step's own batch (V1's dump), then the last stats line (a 10 s
    average, which the failed step postdates)."""
    stack = " ".join(frame.rsplit("::", 1)[-1] for frame in frames)
    if PREFILL_FRAME.search(stack) or PREFILL_FRAME.search(msg) or any(PREFILL_PATH.search(f) for f in frames):
        return "prefill"
    if DECODE_FRAME.search(stack) or any(DECODE_PATH.search(f) for f in frames):
        return "decode"
    if batch:
        return batch
    if not last_stats:
        return None
    if last_stats.get("prompt_tps", 0.0) > 0:
        return "prefill"
    if last_stats.get("running", 0.0) > 0:
        return "decode"
    return None


def request_only(stack: list[str]) -> bool:
    """A frame of code that runs only for a request (its grammar: structured output, guided decoding): the engine
    was serving, whichever start-up marker an excerpt kept last (the model's own serving frames also run in start-up's
    dummy runs, so they do not outrank a marker). Not a constructor: the engine builds its grammar manager at start-up;
    nor a module's body: importing vLLM imports the grammar backends too."""
    return any(module_phase(frame) == "serving" and not frame.endswith(("::__init__", "::<module>")) for frame in stack)
