"""Pin vLLM's EngineCore processes to chosen CPU cores (the profile's `engine_core_cpus`).

Why: on a host with few cores (the CPU testbed has 2), the EngineCore waits for its worker by
spinning on a shared-memory queue (vllm/distributed/device_communicators/shm_broadcast.py,
`SpinCondition.wait`: `sched_yield` for a second after every read). vLLM's CPU backend binds its
worker to all cores but the last (VLLM_CPU_OMP_THREADS_BIND=auto, one reserved core) and leaves the
API server, the EngineCore and any client on that reserved core. There the spin takes half the core
from the API server, whose output handler falls behind the engine's 2 ms steps; it then sends each
answer in one burst at its end, so TTFT and ITL as any client measures them are the front-end's
backlog, not the engine's (measured: 21 to 40 of 46 streamed answers in one burst; none once pinned).
Pinned beside its worker, the EngineCore spins where the worker computes and the API server streams
token by token, as on a GPU host where the front-end has cores of its own. Applied once the server
is ready, when every thread of the engine core exists (threads started later inherit the mask).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from oomkit.serial import JsonObject

# vLLM names the process "<VLLM_PROCESS_NAME_PREFIX>::EngineCore" or "...::EngineCore_DP<rank>"
# (vllm/v1/engine/core.py, run_engine_core -> set_process_title).
ENGINE_CORE_TITLE = re.compile(r"::EngineCore(?:_DP\d+)?(?:\s|$)")


@dataclass(frozen=True)
class Pinning:
    """What `pin_engine_cores` did: the cores asked for, the processes and threads pinned, or why not."""

    cpus: tuple[int, ...]
    pids: tuple[int, ...]
    threads: int
    reason: str | None  # None when every engine-core thread found was pinned

    def to_dict(self) -> JsonObject:
        return {"cpus": list(self.cpus), "pids": list(self.pids), "threads": self.threads, "not_applied": self.reason}


def pin_engine_cores(processes: list[Any], cpus: tuple[int, ...]) -> Pinning:
    """Set the CPU mask of every thread of the EngineCore processes among `processes` (psutil)."""
    if not hasattr(os, "sched_setaffinity"):
        return Pinning(cpus, (), 0, "this platform has no sched_setaffinity (Linux only)")
    allowed = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - allowed)
    if missing:
        have = ",".join(str(c) for c in sorted(allowed))
        return Pinning(cpus, (), 0, f"core(s) {missing} are not available here (this process may use {have})")
    engines = [p for p in processes if _is_engine_core(p)]
    if not engines:
        return Pinning(cpus, (), 0, "no EngineCore process in the server's tree (V0, or a title without ::EngineCore)")
    threads, failures = 0, []
    for proc in engines:
        pinned, error = _pin_threads(proc.pid, set(cpus))
        threads += pinned
        if error:
            failures.append(f"pid {proc.pid}: {error}")
    return Pinning(cpus, tuple(p.pid for p in engines), threads, "; ".join(failures) or None)


def _is_engine_core(proc: Any) -> bool:
    try:
        return bool(ENGINE_CORE_TITLE.search(" ".join(proc.cmdline())))
    except Exception:  # gone, or not ours to read: not an engine core we can pin
        return False


def _pin_threads(pid: int, cpus: set[int]) -> tuple[int, str | None]:
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError as err:
        return 0, f"cannot list its threads ({err.strerror})"
    pinned = 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except OSError as err:
            return pinned, f"thread {tid}: {err.strerror}"
    return pinned, None
