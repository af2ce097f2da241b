"""Memory of the server during a load: NVML per GPU, a DCGM exporter, or the RSS of the server's
process tree (the CPU backend keeps weights and KV cache there). Peaks are kept per label (step)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from oomkit.metrics.periodic import start_loop, stop_loop
from oomkit.serial import JsonObject

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
MIB = 1024 * 1024


class RssProbe:
    """Sum of RSS over a process and its descendants (shared pages count once per process)."""

    source = "rss"

    def __init__(self, pid: int):
        import psutil

        self._psutil = psutil
        self.pid = pid
        self._root = psutil.Process(pid)

    async def read(self) -> dict[str, int] | None:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except self._psutil.Error:
            return None
        out: dict[str, int] = {}
        for proc in procs:
            try:
                out[f"pid{proc.pid}"] = proc.memory_info().rss
            except self._psutil.Error:
                continue
        return out or None


class NvmlProbe:
    """Used memory of every GPU on this host (the whole device, whoever allocated it)."""

    source = "nvml"

    def __init__(self, pynvml: Any, handles: list[Any]):
        self._nvml, self._handles = pynvml, handles

    @classmethod
    def open(cls) -> NvmlProbe | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            return None
        return cls(pynvml, handles) if handles else None

    async def read(self) -> dict[str, int] | None:
        out = {}
        for i, handle in enumerate(self._handles):
            try:
                out[f"gpu{i}"] = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except Exception:
                continue
        return out or None


class DcgmProbe:
    """Framebuffer used per GPU from a DCGM exporter's /metrics (DCGM_FI_DEV_FB_USED, in MiB;
    source: shared/research/peers.md §4.7)."""

    source = "dcgm"

    def __init__(self, url: str, http: httpx.AsyncClient | None = None):
        self.url = url
        self._http = http or httpx.AsyncClient(timeout=5.0, trust_env=False)

    async def read(self) -> dict[str, int] | None:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            text = (await self._http.get(self.url)).text
        except httpx.HTTPError:
            return None
        out: dict[str, int] = {}
        for family in text_string_to_metric_families(text):
            if family.name == "DCGM_FI_DEV_FB_USED":
                for s in family.samples:
                    out[f"gpu{s.labels.get('gpu', len(out))}"] = int(s.value * MIB)
        return out or None


def listening_pid(base_url: str) -> int | None:
    """The pid that listens on the URL's port, when the URL is on this host (else None)."""
    parts = urlsplit(base_url)
    if parts.hostname not in LOCAL_HOSTS:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        import psutil

        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    except Exception:
        return None
    return None


def choose(memory: str, server_pid: int | None, base_url: str) -> tuple[Any | None, str]:
    """A probe for `--memory` (auto, nvml, rss, none, or a DCGM exporter URL) and why it was chosen.
    `auto` reads this host's GPUs (NVML) or the server's RSS only when the server runs here."""
    if memory == "none":
        return None, "memory not measured (--memory none)"
    if memory.startswith(("http://", "https://")):
        return DcgmProbe(memory), f"DCGM exporter {memory}"
    if memory == "nvml":
        nvml = NvmlProbe.open()
        return (nvml, "NVML, used memory per GPU") if nvml else (None, "NVML not available: memory unknown")
    pid = server_pid or listening_pid(base_url)
    if pid is None:
        return None, "memory unknown: the server is not on this host (give --memory URL of a DCGM exporter)"
    if memory == "auto" and (nvml := NvmlProbe.open()):
        return nvml, "NVML, used memory per GPU"
    try:
        return RssProbe(pid), f"RSS of process tree {pid}"
    except Exception as err:
        return None, f"memory unknown: cannot read process {pid} ({type(err).__name__})"


@dataclass
class MemorySampler:
    """Samples `probe` every `interval_s`; keeps the peak per label and writes each sample to `sink`."""

    probe: Any
    sink: Callable[[JsonObject], None] | None = None
    interval_s: float = 0.5
    label: Callable[[], str] = lambda: ""
    peaks: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    _task: asyncio.Task[None] | None = None

    async def sample_now(self) -> int | None:
        reading = await self.probe.read()
        if not reading:
            return None
        total = sum(reading.values())
        label = self.label()
        self.peaks[label] = max(self.peaks.get(label, 0), total)
        self.samples += 1
        if self.sink:
            self.sink(
                {
                    "t_unix_s": round(time.time(), 3),
                    "label": label,
                    "source": self.probe.source,
                    "total_bytes": total,
                    "by": reading,
                }
            )
        return total

    async def _loop(self) -> None:
        while True:
            try:
                await self.sample_now()
            except Exception:
                pass  # a sampling hiccup must not stop the load
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = start_loop(self._loop)

    async def stop(self) -> None:
        await stop_loop(self._task)
        self._task = None
