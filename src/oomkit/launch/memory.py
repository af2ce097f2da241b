"""Memory while a server runs: the RSS of its whole process tree (what the CPU backend uses) and,
when NVML is present, the used memory of every GPU. Peaks are kept per startup phase."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oomkit.errors import MissingDependency
from oomkit.fsio import JsonlWriter
from oomkit.serial import JsonObject

PSUTIL_HINT = "pip install psutil (or pip install 'oomkit[launch]')"
RESCAN_S = 2.0
"""How often a sample looks for new processes in the tree. Finding children means reading every process's
/proc/PID/stat on the host (psutil's children(recursive=True)), by far a sample's largest cost; between scans a
sample reads only the processes already known, and a phase change always rescans (vLLM starts its engine core and
workers at a step boundary)."""
PHASE_POLL_S = 0.05
"""How often the sampler reads the current phase when nobody tells it of a change (a field read, no system call).
A change is sampled at once: a phase shorter than the sampling interval (the tiny testbed loads its weights in about
0.5 s) still gets a peak. A caller that calls `MemorySampler.phase_changed()` on each new phase (the launcher's log
follower does) lets the sampler sleep a whole interval instead: twenty wake-ups a second were most of its CPU."""


def _psutil() -> Any:
    try:
        import psutil
    except ImportError as err:
        raise MissingDependency("oomkit launch needs psutil to watch the server's processes", hint=PSUTIL_HINT) from err
    return psutil


@dataclass(frozen=True)
class ProcSample:
    pid: int
    name: str
    rss_bytes: int


@dataclass(frozen=True)
class GpuSample:
    index: int
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class MemorySample:
    t_s: float
    """Seconds since the server was started."""
    phase: str | None
    rss_bytes: int
    """Sum of RSS over the server's process tree (shared pages count once per process)."""
    procs: tuple[ProcSample, ...]
    gpus: tuple[GpuSample, ...] = ()

    def to_dict(self) -> JsonObject:
        return {
            "t_s": round(self.t_s, 3),
            "phase": self.phase,
            "rss_bytes": self.rss_bytes,
            "gpu_used_bytes": [g.used_bytes for g in self.gpus] or None,
            "procs": [{"pid": p.pid, "name": p.name, "rss_bytes": p.rss_bytes} for p in self.procs],
        }


class ProcessTree:
    """The server's processes, remembered across samples so that a child that outlives its
    parent (re-parented to init) is still known when we check for survivors."""

    def __init__(self, root_pid: int):
        self._psutil = _psutil()
        self.root = self._psutil.Process(root_pid)
        self._seen: dict[int, Any] = {root_pid: self.root}
        self._lock = threading.Lock()

    def live(self) -> list[Any]:
        """Every process of the tree now alive (and every one seen before that still is)."""
        found: list[Any] = []
        try:
            found = [self.root, *self.root.children(recursive=True)]
        except self._psutil.Error:
            pass
        with self._lock:
            for proc in found:
                self._seen.setdefault(proc.pid, proc)
            return [p for p in self._seen.values() if _running(p)]

    def known(self) -> list[Any]:
        """The processes already seen, without looking for new ones or checking that they still run (a sample skips
        one that has gone: reading it raises); `live` checks."""
        with self._lock:
            return list(self._seen.values())

    def seen_pids(self) -> list[int]:
        with self._lock:
            return sorted(self._seen)


def _running(proc: Any) -> bool:
    # is_running() compares create times, so a reused pid is not mistaken for our process.
    try:
        return proc.is_running() and proc.status() != "zombie"
    except Exception:
        return False


def sample_tree(
    tree: ProcessTree, t_s: float, phase: str | None, gpus: Nvml | None, rescan: bool = True
) -> MemorySample:
    """`rescan`: look for processes the tree started since the last scan (else read the known ones)."""
    procs: list[ProcSample] = []
    for proc in tree.live() if rescan else tree.known():
        try:
            with proc.oneshot():
                procs.append(ProcSample(proc.pid, proc.name(), proc.memory_info().rss))
        except Exception:
            continue  # exited between listing and reading
    gpu = gpus.sample() if gpus else ()
    return MemorySample(t_s, phase, sum(p.rss_bytes for p in procs), tuple(procs), gpu)


class Nvml:
    """Per-GPU used memory through nvidia-ml-py; absent (None from `open`) without a GPU."""

    def __init__(self, pynvml: Any, handles: list[Any]):
        self._nvml = pynvml
        self._handles = handles

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception:
            return None
        return cls(pynvml, handles) if handles else None

    def sample(self) -> tuple[GpuSample, ...]:
        out = []
        for i, handle in enumerate(self._handles):
            try:
                info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:
                continue
            out.append(GpuSample(i, int(info.used), int(info.total)))
        return tuple(out)


@dataclass
class PhasePeaks:
    """Largest value seen in each phase; `order` keeps phases in the order they were reached."""

    rss_bytes: dict[str, int] = field(default_factory=dict)
    gpu_used_bytes: dict[str, list[int]] = field(default_factory=dict)

    def add(self, sample: MemorySample) -> None:
        phase = sample.phase or "starting"
        self.rss_bytes[phase] = max(self.rss_bytes.get(phase, 0), sample.rss_bytes)
        if sample.gpus:
            old = self.gpu_used_bytes.get(phase, [0] * len(sample.gpus))
            self.gpu_used_bytes[phase] = [max(a, g.used_bytes) for a, g in zip(old, sample.gpus, strict=False)]

    def primary(self) -> dict[str, int]:
        """Peak per phase in the unit that limits the server: GPU memory (summed) when measured,
        else the process tree's RSS (the CPU backend's KV cache and weights live there)."""
        if self.gpu_used_bytes:
            return {phase: sum(v) for phase, v in self.gpu_used_bytes.items()}
        return dict(self.rss_bytes)


class MemorySampler:
    """Samples in a thread every `interval_s`, and whenever the phase changes, until stopped; writes
    each sample as a JSONL line."""

    def __init__(
        self,
        tree: ProcessTree,
        writer: JsonlWriter,
        phase: Callable[[], str | None],
        interval_s: float = 0.5,
        started: float | None = None,
    ):
        self.tree = tree
        self.peaks = PhasePeaks()
        self.samples = 0
        self._writer = writer
        self._phase = phase
        self._interval_s = interval_s
        self._started = started if started is not None else time.monotonic()
        self._gpus = Nvml.open()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oomkit-memory", daemon=True)
        self._lock = threading.Lock()
        self._next_scan_s = 0.0
        self._wake = threading.Event()
        self._told = False  # a caller reports phase changes: no need to poll for them

    @property
    def source(self) -> str:
        return "nvml" if self._gpus else "rss"

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def sample_now(self, rescan: bool = True) -> MemorySample:
        now_s = time.monotonic()
        rescan = rescan or now_s >= self._next_scan_s
        if rescan:
            self._next_scan_s = now_s + RESCAN_S
        sample = sample_tree(self.tree, now_s - self._started, self._phase(), self._gpus, rescan)
        with self._lock:
            if sample.procs:
                self.peaks.add(sample)
                self._writer.append(sample.to_dict())
                self.samples += 1
        return sample

    def phase_changed(self) -> None:
        """The phase moved on: sample now, not at the next interval."""
        self._told = True
        self._wake.set()

    def _run(self) -> None:
        sampled_phase: str | None = None
        next_due_s = 0.0
        while not self._stop.is_set():
            self._wake.clear()  # before the read: a change reported after it wakes the wait below at once
            try:
                phase, now_s = self._phase(), time.monotonic()
                if phase != sampled_phase or now_s >= next_due_s:
                    changed = phase != sampled_phase
                    sampled_phase, next_due_s = phase, now_s + self._interval_s
                    self.sample_now(rescan=changed)
            except Exception:
                pass  # a sampling hiccup must never take the launch down
            self._wake.wait(self._interval_s if self._told else min(PHASE_POLL_S, self._interval_s))

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            self._writer.close()
