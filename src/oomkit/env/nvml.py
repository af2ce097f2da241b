"""Driver and GPUs through NVML (the optional `nvidia-ml-py` package, module `pynvml`).
Imported lazily: oomkit runs without it and falls back to nvidia-smi."""

from __future__ import annotations

import ctypes
import importlib
from types import ModuleType
from typing import Any

from oomkit.env.hardware import identify
from oomkit.env.model import DriverInfo, GpuInfo

INSTALL_HINT = "pip install 'oomkit[nvml]'"


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why (for the snapshot's notes)."""


def load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({INSTALL_HINT})") from None


def read_nvml(nvml: Any) -> tuple[DriverInfo, tuple[GpuInfo, ...]]:
    """Reads every GPU through an object with the pynvml API (the module, or a test double)."""
    try:
        nvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(f"NVML did not initialise: {err}") from None
    try:
        driver = DriverInfo(_str(nvml.nvmlSystemGetDriverVersion()), _cuda_version(nvml), "nvml")
        gpus = tuple(_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount()))
    except Exception as err:
        raise NvmlUnavailable(f"NVML query failed: {err}") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass  # a failed shutdown leaves nothing for us to clean up
    return driver, gpus


def _gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _str(nvml.nvmlDeviceGetName(handle))
    fabric = _optional(lambda: nvml.nvmlDeviceGetGpuFabricInfo(handle))
    return GpuInfo(
        index=index,
        name=name,
        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        uuid=_str(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_str(nvml.nvmlDeviceGetPciInfo(handle).busId),
        mig_mode=_mig_mode(nvml, handle),
        hardware=identify(name),
        fabric_state=_fabric_state(fabric),
        fabric_cluster_uuid=_fabric_uuid(fabric),
        fabric_clique_id=None if fabric is None else str(fabric.cliqueId),
    )


def _cuda_version(nvml: Any) -> str | None:
    raw = _optional(nvml.nvmlSystemGetCudaDriverVersion_v2) or _optional(nvml.nvmlSystemGetCudaDriverVersion)
    if not raw:
        return None
    return f"{raw // 1000}.{(raw % 1000) // 10}"  # NVML encodes 13.0 as 13000


def _mig_mode(nvml: Any, handle: Any) -> str | None:
    mode = _optional(lambda: nvml.nvmlDeviceGetMigMode(handle))
    if mode is None:
        return None  # NVMLError_NotSupported: this GPU has no MIG
    return "Enabled" if mode[0] else "Disabled"


# nvmlGpuFabricState_t: 0 not supported, 1 not started, 2 in progress, 3 completed (nvml.h).
_FABRIC_STATES = {0: None, 1: "Not Started", 2: "In Progress", 3: "Completed"}


def _fabric_state(fabric: Any) -> str | None:
    return None if fabric is None else _FABRIC_STATES.get(int(fabric.state))


def _fabric_uuid(fabric: Any) -> str | None:
    if fabric is None:
        return None
    try:  # read the 16 raw bytes: a ctypes char array stops at the first NUL byte
        offset = type(fabric).clusterUuid.offset
        raw = ctypes.string_at(ctypes.addressof(fabric) + offset, 16).hex()
    except (AttributeError, TypeError):
        raw = bytes(fabric.clusterUuid).ljust(16, b"\0")[:16].hex()
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:32]}"


def _optional(call: Any) -> Any:
    try:
        return call()
    except Exception:
        return None  # NVML raises for "not supported" on older GPUs or drivers


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
