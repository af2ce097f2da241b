"""The host around the GPUs: CPU, RAM, ulimits, container hints, RDMA devices, and the environment
variables that change vLLM's memory or startup (secrets masked)."""

from __future__ import annotations

import os
import platform
import re
import resource
from pathlib import Path

from oomkit.env.model import HostInfo, RdmaDevice
from oomkit.redact import redact_env

# Prefixes and names of the variables that matter (issue 4); anything else is not recorded.
ENV_PREFIXES = ("VLLM_", "NCCL_", "UCX_", "CUDA_", "NVIDIA_")
ENV_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "OMP_NUM_THREADS", "LD_PRELOAD")

# (name, resource constant, unit) — the limits vLLM and NCCL run into.
_RLIMITS = (
    ("nofile", "RLIMIT_NOFILE", ""),  # vLLM raises it to 65536 and warns when it cannot
    ("memlock", "RLIMIT_MEMLOCK", "KiB"),  # RDMA registration pins memory; "unlimited" is the norm
    ("nproc", "RLIMIT_NPROC", ""),
    ("stack", "RLIMIT_STACK", "KiB"),
)
# `ulimit -a` flag -> our name.
_ULIMIT_FLAGS = {"-n": "nofile", "-l": "memlock", "-u": "nproc", "-s": "stack"}
ULIMIT_UNITS = {"memlock": "KiB", "stack": "KiB"}  # as `ulimit -a` prints them

# Container hints: (test, hint, source). Environment variables are read from the snapshot env.
CONTAINER_ENV_HINTS = (
    ("KUBERNETES_SERVICE_HOST", "Kubernetes pod", "set by the kubelet in every pod"),
    ("NVIDIA_REQUIRE_CUDA", "NVIDIA CUDA base image", "ENV in nvidia/cuda images"),
    ("NVIDIA_PYTORCH_VERSION", "NGC PyTorch image", "ENV in nvcr.io/nvidia/pytorch images"),
    ("VLLM_USAGE_SOURCE", "vLLM image", "ENV VLLM_USAGE_SOURCE=production-docker-image in vLLM's Dockerfile"),
)
CONTAINER_ENV_HINTS_NAMES = tuple(name for name, _, _ in CONTAINER_ENV_HINTS)


def relevant_env(environ: dict[str, str]) -> dict[str, str]:
    names = ENV_NAMES + CONTAINER_ENV_HINTS_NAMES
    picked = {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in names}
    return redact_env(dict(sorted(picked.items())))


def container_hints(env: dict[str, str], files: dict[str, bool]) -> tuple[str, ...]:
    hints = [hint for name, hint, _ in CONTAINER_ENV_HINTS if name in env]
    if files.get("/.dockerenv"):
        hints.append("Docker (/.dockerenv)")
    if files.get("/run/.containerenv"):
        hints.append("Podman (/run/.containerenv)")
    return tuple(hints)


def read_host(environ: dict[str, str]) -> HostInfo:
    """This machine, from /proc, /sys and getrlimit."""
    meminfo = _read("/proc/meminfo")
    total, available = parse_meminfo(meminfo) if meminfo else (None, None)
    cgroup = _cgroup_hint()
    hints = container_hints(environ, {p: os.path.exists(p) for p in ("/.dockerenv", "/run/.containerenv")})
    return HostInfo(
        cpu_model=parse_cpu_model(_read("/proc/cpuinfo") or "") or platform.processor() or None,
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        ram_total_bytes=total,
        ram_available_bytes=available,
        ulimits=_live_ulimits(),
        container_hints=hints + ((cgroup,) if cgroup else ()),
        rdma_devices=read_rdma(Path("/sys/class/infiniband")),
        shm_bytes=_shm_bytes(),
        kernel=platform.release() or None,
    )


def parse_meminfo(text: str) -> tuple[int | None, int | None]:
    def field(name: str) -> int | None:
        match = re.search(rf"^{name}:\s+(\d{{1,19}})\s*kB", text, re.MULTILINE)  # 19 digits: int() has a limit
        return int(match.group(1)) * 1024 if match else None

    return field("MemTotal"), field("MemAvailable")


def parse_cpu_model(text: str) -> str | None:
    """From /proc/cpuinfo ("model name") or `lscpu` ("Model name:")."""
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE | re.IGNORECASE)
    return match.group(1).strip() if match else None


def parse_lscpu_count(text: str) -> int | None:
    match = re.search(r"^CPU\(s\):\s*(\d{1,9})\b", text, re.MULTILINE)  # more digits is no CPU count
    if match:
        return int(match.group(1))
    processors = re.findall(r"^processor\s*:", text, re.MULTILINE)
    return len(processors) or None


def parse_ulimit(text: str) -> tuple[tuple[str, str], ...]:
    """From `ulimit -a` (bash): "open files                          (-n) 1048576"."""
    out = []
    for line in text.splitlines():
        match = re.search(r"\((?:[^()]*,\s*)?(-[a-zA-Z])\)\s+(\S+)\s*$", line)
        if match and match.group(1) in _ULIMIT_FLAGS:
            out.append((_ULIMIT_FLAGS[match.group(1)], match.group(2)))
    return tuple(out)


def parse_env_text(text: str) -> dict[str, str]:
    """`env` output (KEY=VALUE lines) or /proc/PID/environ (NUL-separated)."""
    entries = text.split("\0") if "\0" in text else text.splitlines()
    env: dict[str, str] = {}
    last: str | None = None
    for entry in entries:
        match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", entry, re.DOTALL)
        if match:
            last = match.group(1)
            env[last] = match.group(2)
        elif last is not None and entry:
            env[last] += "\n" + entry  # a multi-line value continues on the next line
    return env


def parse_infiniband(text: str) -> tuple[RdmaDevice, ...]:
    """From `grep -H . /sys/class/infiniband/*/ports/*/{link_layer,state,rate}` or a bare
    `ls /sys/class/infiniband` listing."""
    fields: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        match = re.search(r"infiniband/([^/]+)/ports/\d+/(link_layer|state|rate):(.*)$", line)
        if match:
            fields.setdefault(match.group(1), {})[match.group(2)] = match.group(3).strip()
        elif re.fullmatch(r"\s*[A-Za-z][\w\-]*\s*", line):
            fields.setdefault(line.strip(), {})
    return tuple(
        RdmaDevice(name, f.get("link_layer"), f.get("state"), f.get("rate")) for name, f in sorted(fields.items())
    )


def read_rdma(root: Path) -> tuple[RdmaDevice, ...]:
    if not root.is_dir():
        return ()
    devices = []
    for dev in sorted(root.iterdir()):
        port = next(iter(sorted((dev / "ports").glob("*"))), None)
        read = (lambda name, port=port: _read(str(port / name))) if port else (lambda name: None)
        devices.append(RdmaDevice(dev.name, _strip(read("link_layer")), _strip(read("state")), _strip(read("rate"))))
    return tuple(devices)


def _live_ulimits() -> tuple[tuple[str, str], ...]:
    out = []
    for name, const, unit in _RLIMITS:
        soft, _hard = resource.getrlimit(getattr(resource, const))
        if soft == resource.RLIM_INFINITY:
            out.append((name, "unlimited"))
        else:
            out.append((name, str(soft // 1024 if unit == "KiB" else soft)))
    return tuple(out)


def _cgroup_hint() -> str | None:
    text = _read("/proc/1/cgroup") or ""
    match = re.search(r"(docker|kubepods|containerd|libpod|lxc)", text)
    return f"cgroup names {match.group(1)}" if match else None


def _shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")  # NCCL needs a large /dev/shm; Docker's default is 64 MB
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _strip(value: str | None) -> str | None:
    return value.strip() if value is not None else None
