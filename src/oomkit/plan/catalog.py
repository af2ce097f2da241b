"""Built-in catalogs shipped as package data: models (data/models/index.yaml + config.json files)
and GPUs (data/gpus.yaml). Every entry carries a `source` note."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import NotRequired, TypedDict

import yaml

from oomkit.errors import InputError, UsageError
from oomkit.plan.config import load_config
from oomkit.plan.model import ModelShape, shape_from_config
from oomkit.serial import JsonObject

# cudaMemGetInfo's total is a little below nvidia-smi's: H100 80GB shows 81559 MiB in nvidia-smi
# and 79.19 GiB in vLLM's lines (0.58% less). Used for GPUs without a printed total.
CUDA_VISIBLE_FRACTION = 79.19 * 1024 / 81559


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None
    cuda_total_gib: float | None
    hbm_bandwidth_gbps: int | None
    nvlink_domain: int
    arch: str
    platform: str
    source: str

    def capacity_gib(self, override_gib: float | None) -> tuple[float | None, str]:
        """Total memory as vLLM sees it, and where the number came from."""
        if override_gib is not None:
            return override_gib, "--gpu-memory-gib"
        if self.cuda_total_gib is not None:
            return self.cuda_total_gib, f"{self.name}: total printed by vLLM (catalog)"
        if self.memory_mib is None:
            return None, f"{self.name}: no fixed memory size"
        return (
            round(self.memory_mib / 1024 * CUDA_VISIBLE_FRACTION, 2),
            f"{self.name}: nvidia-smi {self.memory_mib} MiB x cuda_visible_fraction",
        )

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "memory_mib": self.memory_mib,
            "cuda_total_gib": self.cuda_total_gib,
            "hbm_bandwidth_gbps": self.hbm_bandwidth_gbps,
            "nvlink_domain": self.nvlink_domain,
            "arch": self.arch,
            "source": self.source,
        }


def _data(name: str) -> Traversable:
    return resources.files("oomkit") / "data" / name


@lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    rows = yaml.safe_load(_data("gpus.yaml").read_text(encoding="utf-8"))
    return tuple(
        Gpu(
            r["name"],
            r.get("memory_mib"),
            r.get("cuda_total_gib"),
            r.get("hbm_bandwidth_gbps"),
            int(r.get("nvlink_domain") or 1),
            r.get("arch", ""),
            r.get("platform", "cuda"),
            r["source"],
        )
        for r in rows
    )


@lru_cache(maxsize=1)
def _gpu_aliases() -> dict[str, Gpu]:
    rows = yaml.safe_load(_data("gpus.yaml").read_text(encoding="utf-8"))
    table: dict[str, Gpu] = {}
    for gpu, row in zip(gpus(), rows, strict=False):
        for key in [gpu.name, *row.get("aliases", [])]:
            table[_norm(str(key))] = gpu
    return table


def _norm(text: str) -> str:
    return text.lower().replace("_", "-").replace(" ", "-").removeprefix("nvidia-")


def find_gpu(name: str, memory_gib: float | None = None) -> Gpu:
    gpu = _gpu_aliases().get(_norm(name))
    if gpu:
        return gpu
    if memory_gib is not None:  # an unlisted GPU is usable when its memory is given
        return Gpu(
            name, int(memory_gib * 1024), memory_gib, None, 1, "unknown", "cuda", "user-supplied --gpu-memory-gib"
        )
    known = ", ".join(g.name for g in gpus())
    raise UsageError(f"unknown GPU {name!r}; known: {known}", hint="or describe it with --gpu-memory-gib N")


class ModelEntry(TypedDict):
    """One row of data/models/index.yaml: a built-in model and the config.json shipped for it."""

    name: str
    aliases: NotRequired[list[str]]
    file: str
    source: str


@lru_cache(maxsize=1)
def _model_index() -> tuple[ModelEntry, ...]:
    rows: list[ModelEntry] = yaml.safe_load(_data("models/index.yaml").read_text(encoding="utf-8"))
    return tuple(rows)


def model_names() -> list[str]:
    return [row["name"] for row in _model_index()]


def catalog_rows() -> list[ModelEntry]:
    return [row.copy() for row in _model_index()]


def find_model(name_or_path: str, overrides: Mapping[str, object] | None = None) -> ModelShape:
    """A catalog name or alias, else a config.json file or a model directory."""
    key = name_or_path.strip().lower()
    for row in _model_index():
        if key in [row["name"].lower(), *(a.lower() for a in row.get("aliases", []))]:
            data = json.loads(_data(f"models/{row['file']}").read_text(encoding="utf-8"))
            return shape_from_config(data, row["name"], row["source"], overrides)
    path = Path(name_or_path).expanduser()
    if path.exists():
        return shape_from_config(
            load_config(path), path.name if path.is_dir() else path.parent.name, f"config.json at {path}", overrides
        )
    raise InputError(
        f"model {name_or_path!r} is neither a catalog name nor a path", hint="known: " + ", ".join(model_names())
    )
