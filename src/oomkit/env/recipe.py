"""The vLLM recipes YAML format (vllm-project/recipes `models/<org>/<model>.yaml`).

Recipes are written by others and keep growing keys, so unknown keys are kept, not rejected;
only the keys the check and the command builder read are typed. Requirements the recipe states
only in prose (driver, CUDA build, all-to-all backend) are read with the patterns below."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from oomkit.errors import InputError
from oomkit.yamlio import load_yaml


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _str_list(value: Any) -> Any:
    return [_scalar(v) for v in value] if isinstance(value, list) else value


def _str_dict(value: Any) -> Any:
    return {str(k): _scalar(v) for k, v in value.items()} if isinstance(value, dict) else value


Args = Annotated[list[str], BeforeValidator(_str_list)]
Env = Annotated[dict[str, str], BeforeValidator(_str_dict)]


class _Loose(BaseModel):
    """Keeps keys we do not read; `key:` with no value (None in YAML) means the default."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class Override(_Loose):
    extra_args: Args = []
    extra_env: Env = {}
    args: Args = []  # features spell it `args`
    env: Env = {}


class Feature(_Loose):
    description: str = ""
    args: Args = []
    env: Env = {}
    strategies: list[str] | None = None  # None: every strategy
    hardware_overrides: dict[str, Override] = {}


class Variant(_Loose):
    model_id: str | None = None
    precision: str | None = None
    vram_minimum_gb: float | None = None
    description: str = ""
    extra_args: Args = []
    extra_env: Env = {}
    supported_hardware: list[str] | None = None
    tp: int | None = None
    hardware_overrides: dict[str, Override] = {}


class Pool(_Loose):
    """One side of `strategy_overrides.pd_cluster`: the prefill or the decode pool."""

    nodes: int | None = None
    parallelism: str | None = None  # "tp", "tep", "dep"
    tp: int | None = None
    vllm_args: Args = []
    env: Env = {}
    hardware_overrides: dict[str, Override] = {}


class StrategyOverride(_Loose):
    extra_args: Args = []
    extra_env: Env = {}
    env: Env = {}
    tp: int | dict[str, int] | None = None  # a dict is per hardware key
    hardware_overrides: dict[str, Override] = {}
    prefill: Pool | None = None
    decode: Pool | None = None


class Dependency(_Loose):
    note: str = ""
    command: str = ""


class Meta(_Loose):
    title: str = ""
    slug: str = ""
    hardware: dict[str, str] = {}  # key -> "verified"
    default_hardware: str | None = None


class ModelSection(_Loose):
    model_id: str
    min_vllm_version: str | None = None
    base_args: Args = []
    base_env: Env = {}
    install: dict[str, Any] = {}
    context_length: int | None = None
    parameter_count: str | None = None


class Recipe(_Loose):
    meta: Meta = Meta()
    model: ModelSection
    features: dict[str, Feature] = {}
    opt_in_features: list[str] = []
    hardware_opt_in_features: dict[str, list[str]] = {}
    variants: dict[str, Variant] = {}
    compatible_strategies: list[str] = []
    strategy_hardware: dict[str, dict[str, str]] = {}  # strategy -> hardware -> supported|unsupported
    default_strategy: str | None = None
    strategy_min_gpus: dict[str, int] = {}  # keyed by strategy, and by hardware (h100: 32)
    hardware_overrides: dict[str, Override] = {}
    strategy_overrides: dict[str, StrategyOverride] = {}
    dependencies: list[Dependency] = []
    guide: str = ""

    @property
    def name(self) -> str:
        return self.meta.title or self.model.model_id

    def strategies(self) -> tuple[str, ...]:
        """Every strategy the recipe names: compatible ones, then ones granted per hardware."""
        extra = [s for s in self.strategy_hardware if s not in self.compatible_strategies]
        return tuple(self.compatible_strategies) + tuple(extra)

    def prose(self) -> str:
        """The free text that states requirements: install notes, dependency notes, the guide."""
        parts = [*_strings(self.model.install), *(f"{d.note}\n{d.command}" for d in self.dependencies), self.guide]
        return "\n".join(parts)


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


class _NoFloatLoader(yaml.SafeLoader):
    """Keeps `0.10` as the string "0.10": an unquoted version must not turn into 0.1."""


_NoFloatLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: cannot read the recipe (no such file)", "pass a vLLM recipes YAML file")
    data = load_yaml(p, "recipe", "pass a vLLM recipes YAML file", loader=_NoFloatLoader)
    if not isinstance(data, dict) or "model" not in data:
        raise InputError(
            f"{p}: not a vLLM recipe (no `model:` section)",
            "recipes look like vllm-project/recipes models/<org>/<model>.yaml",
        )
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{p}: {where}: {first['msg']}", "fix that key in the recipe") from None


# Requirements stated in prose. Each pattern: (what, regex, source).
@dataclass(frozen=True)
class ProsePattern:
    what: str
    regex: str
    source: str


PROSE_PATTERNS = (
    ProsePattern("driver_min", r"\br(\d{3})\+", "K3 recipe: 'the host needs an r580+ NVIDIA driver'"),
    ProsePattern("driver_min", r"driver\s*(?:version\s*)?(?:>=|≥)\s*r?(\d{3})\b", "common 'driver >= 580' wording"),
    ProsePattern(
        "cuda_build_only",
        r"CUDA\s+(\d+)(?:\.\d+)?\s*\((cu\d{3})\)\s*build\s+only",
        "K3 recipe: 'CUDA 13 (cu130) build only'",
    ),
    ProsePattern(
        "all2all",
        r"--all2all-backend\s+`?(\w+)`?\s+for\s+(RDMA|NVLink)",
        "K3 recipe notes: '--all2all-backend deepep_v2 for RDMA and ... for NVLink'",
    ),
    ProsePattern("pin", r"\bvllm==(\d[\w.]*)", "Kimi-Linear recipe dependencies: 'Pin vllm==0.11.2'"),
    ProsePattern(
        "broken", r"\b(\d+\.\d+\.\d+)\s+has a known", "Kimi-Linear recipe: '0.12.0 has a known ... regression'"
    ),
)


@dataclass(frozen=True)
class ProseFacts:
    driver_min: int | None  # driver branch, e.g. 580
    cuda_build: tuple[int, str] | None  # (13, "cu130")
    all2all: dict[str, str]  # {"rdma": "deepep_v2", "nvlink": "flashinfer_nvlink_one_sided"}
    pin: str | None
    broken_versions: tuple[str, ...]
    quotes: dict[str, str]  # what -> the sentence it was read from


def read_prose(recipe: Recipe) -> ProseFacts:
    text = recipe.prose()
    found: dict[str, list[re.Match[str]]] = {}
    for pat in PROSE_PATTERNS:
        found.setdefault(pat.what, []).extend(re.finditer(pat.regex, text, re.IGNORECASE))
    driver = max((int(m.group(1)) for m in found["driver_min"]), default=None)
    cuda = next(((int(m.group(1)), m.group(2).lower()) for m in found["cuda_build_only"]), None)
    all2all = {m.group(2).lower(): m.group(1) for m in found["all2all"]}
    pin = next((m.group(1) for m in found["pin"]), None)
    quotes = {what: _sentence(text, ms[0].start()) for what, ms in found.items() if ms}
    return ProseFacts(driver, cuda, all2all, pin, tuple(m.group(1) for m in found["broken"]), quotes)


def _sentence(text: str, pos: int) -> str:
    start = max(text.rfind("\n", 0, pos), text.rfind(". ", 0, pos) + 1, 0)
    end = min(x for x in (text.find("\n", pos), text.find(". ", pos), len(text)) if x >= 0)
    return " ".join(text[start:end].split()).strip(" -*")
