"""Reads `nvidia-smi -q -x` (XML) and `nvidia-smi topo -m` (text), live or from captured files."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

from oomkit.env.hardware import identify
from oomkit.env.model import DriverInfo, GpuInfo, Topology
from oomkit.errors import InputError

MIB = 1024 * 1024
SMI_TIMEOUT_S = 30
# A device column in `topo -m`: GPUn, NICn (drivers >= 470) or a bare mlx5_n (older drivers).
_DEVICE_COLUMN = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")


def parse_smi_xml(text: str, source: str) -> tuple[DriverInfo, tuple[GpuInfo, ...]]:
    """Driver and GPUs from `nvidia-smi -q -x` output."""
    if "<!ENTITY" in text:
        raise InputError(
            f"{source}: XML with entity declarations is not nvidia-smi output",
            "capture it again with `nvidia-smi -q -x > nvidia-smi-q.xml`",
        )
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise InputError(
            f"{source}: not well-formed XML ({err})", "capture it again with `nvidia-smi -q -x > nvidia-smi-q.xml`"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise InputError(
            f"{source}: root element is <{root.tag}>, not <nvidia_smi_log>", "pass the output of `nvidia-smi -q -x`"
        )
    driver = DriverInfo(_text(root, "driver_version"), _text(root, "cuda_version"), source)
    gpus = tuple(_gpu(i, node) for i, node in enumerate(root.findall("gpu")))
    return driver, gpus


def _gpu(index: int, node: ET.Element) -> GpuInfo:
    name = _text(node, "product_name") or "unknown GPU"
    return GpuInfo(
        index=index,
        name=name,
        memory_total_bytes=_mib_to_bytes(_text(node, "fb_memory_usage/total")),
        uuid=_text(node, "uuid"),
        pci_bus_id=_text(node, "pci/pci_bus_id") or node.get("id"),
        mig_mode=_text(node, "mig_mode/current_mig"),
        architecture=_text(node, "product_architecture"),
        hardware=identify(name),
        fabric_state=_text(node, "fabric/state"),
        fabric_cluster_uuid=_text(node, "fabric/clusterUuid"),
        fabric_clique_id=_text(node, "fabric/cliqueId"),
    )


def _text(node: ET.Element, path: str) -> str | None:
    """Element text, with nvidia-smi's "N/A" and empty values read as missing."""
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "None", "[N/A]") else value


def _mib_to_bytes(value: str | None) -> int | None:
    match = re.fullmatch(r"(\d{1,19})\s*MiB", value or "")  # more digits is no memory size
    return int(match.group(1)) * MIB if match else None


def parse_topo(text: str, source: str) -> Topology:
    """The link matrix of `nvidia-smi topo -m`. Cells may be separated by tabs or spaces."""
    lines = [ln.rstrip("\n") for ln in text.splitlines()]
    # The header names the columns; every matrix row has an "X" on its diagonal.
    header = next((ln for ln in lines if "GPU0" in ln.split() and "X" not in ln.split()), None)
    if header is None:
        raise InputError(
            f"{source}: no device header (GPU0 ...) found", "capture it again with `nvidia-smi topo -m > topo-m.txt`"
        )
    devices = tuple(tok for tok in header.split() if _DEVICE_COLUMN.match(tok))
    links: list[tuple[str, str, str]] = []
    for line in lines:
        cells = line.split()
        if not cells or cells[0] not in devices or "X" not in cells:
            continue
        for other, cell in zip(devices, cells[1 : 1 + len(devices)], strict=False):
            if other != cells[0] and cell != "X":
                links.append((cells[0], other, cell))
    nics = tuple((m.group(1), m.group(2)) for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)", text, re.MULTILINE))
    return Topology(devices=devices, links=tuple(links), nics=nics, source=source)


def run_smi(args: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None) on success, (None, why) when nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH"
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"`nvidia-smi {' '.join(args)}` did not run: {err}"
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        return None, f"`nvidia-smi {' '.join(args)}` failed (rc {done.returncode}): {message[0] if message else ''}"
    return done.stdout, None
