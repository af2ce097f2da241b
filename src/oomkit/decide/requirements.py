"""The requirements file (YAML, strict): the production load in numbers. Every field name carries
its unit; a value written with a unit ("2s", "12k", "90%") is refused with the number to write."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from oomkit.errors import InputError
from oomkit.serial import JsonObject
from oomkit.yamlio import load_yaml

# "2s" in a *_ms field, "5m" in a *_s field, "12k" tokens, "90%" in a *_pct field.
_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z%]+)\s*$")
_SCALE = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "k": 1e3, "K": 1e3, "M": 1e6}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TokenRange(_Strict):
    typical: int = Field(ge=1, le=10_000_000, description="tokens of a typical request")
    max: int = Field(ge=1, le=10_000_000, description="tokens of the largest request that must be served")

    @model_validator(mode="after")
    def _order(self) -> TokenRange:
        if self.typical > self.max:
            raise ValueError(f"typical ({self.typical}) is larger than max ({self.max})")
        return self


class Slo(_Strict):
    ttft_p95_ms: float = Field(gt=0, description="95th percentile time to first token, milliseconds")
    e2e_p95_ms: float = Field(gt=0, description="95th percentile full response time of a request, milliseconds")


class Deployment(_Strict):
    """Optional: what the planner needs for "expand by N GPUs / change layout" numbers."""

    model: str = Field(description="planner catalog name or a config.json path (oomkit plan --list)")
    gpu: str = Field(description="GPU catalog name, e.g. H200-141GB")
    gpus_per_node: int = Field(default=8, ge=1, le=72)


class Requirements(_Strict):
    name: str = Field(min_length=1, max_length=80)
    input_tokens: TokenRange
    output_tokens: TokenRange
    concurrent_dialogs: int = Field(ge=1, le=1_000_000, description="agent dialogs served at once")
    agent_steps_per_dialog: int = Field(ge=1, le=10_000)
    system_prefix_reuse_pct: float = Field(ge=0, le=100, description="share of the system prefix reused, %")
    recovery_time_s: float = Field(gt=0, description="longest acceptable restart, seconds")
    image_update_headroom_pct: float = Field(ge=0, lt=100, description="memory kept free for image updates, %")
    peak_reserve_pct: float = Field(ge=0, le=1000, description="concurrency reserve for short peaks, %")
    slo: Slo
    workload: str | None = Field(
        default=None, description="workload YAML whose requests represent this load (relative)"
    )
    deployment: Deployment | None = None
    source: str | None = Field(default=None, exclude=True)

    @field_validator("workload")
    @classmethod
    def _yaml(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith((".yaml", ".yml", ".jsonl")):
            raise ValueError("a workload YAML or a request-set.jsonl path")
        return value

    def target_with_reserve(self) -> float:
        return self.concurrent_dialogs * (1 + self.peak_reserve_pct / 100)

    def longest_request_tokens(self) -> int:
        return self.input_tokens.max + self.output_tokens.max

    def workload_path(self) -> str | None:
        if self.workload is None or Path(self.workload).is_absolute() or not self.source:
            return self.workload
        return str((Path(self.source).parent / self.workload).resolve())

    def to_dict(self) -> JsonObject:
        return self.model_dump(mode="json")


def _unit_hint(field: str, value: object) -> str | None:
    """The number to write when a value carries a unit."""
    if not isinstance(value, str):
        return None
    m = _UNIT.match(value)
    if not m:
        return None
    number, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        return f"write the number without % ({m.group(1)})" if field.endswith("_pct") else None
    if field.endswith("_ms") and unit in _SCALE:
        return f"the unit is milliseconds: write {number * _SCALE[unit] * 1000:g}"
    if field.endswith("_s") and unit in _SCALE:
        return f"the unit is seconds: write {number * _SCALE[unit]:g}"
    if unit in ("k", "K", "M"):
        return f"write the plain number: {int(number * _SCALE[unit])}"
    return None


def _at(data: object, loc: tuple[int | str, ...]) -> object:
    for part in loc:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _nearest(loc: tuple[int | str, ...]) -> str:
    models: dict[str, type[BaseModel]] = {
        "input_tokens": TokenRange,
        "output_tokens": TokenRange,
        "slo": Slo,
        "deployment": Deployment,
    }
    model = models.get(str(loc[0]), Requirements) if len(loc) > 1 else Requirements
    found = difflib.get_close_matches(str(loc[-1]), [n for n in model.model_fields if n != "source"], n=1, cutoff=0.5)
    return f" (did you mean `{found[0]}`?)" if found else ""


def _describe(e: ErrorDetails, data: object) -> str:
    loc = tuple(p for p in e["loc"])
    where = ".".join(str(p) for p in loc)
    if e["type"] == "missing":
        return f"missing field `{where}`"
    if e["type"] == "extra_forbidden":
        return f"unknown field `{where}`{_nearest(loc)}"
    hint = _unit_hint(str(loc[-1]) if loc else "", _at(data, loc))
    if hint:
        return f"`{where}` is {_at(data, loc)!r}: {hint}"
    return f"`{where}`: {str(e['msg']).removeprefix('Value error, ')}"


def parse_requirements(data: object, source: str = "<requirements>") -> Requirements:
    if not isinstance(data, dict):
        raise InputError(f"{source}: requirements are a YAML mapping", hint="see examples/requirements-testbed.yaml")
    try:
        return Requirements.model_validate({**data, "source": source})
    except ValidationError as err:
        errors = err.errors()
        missing = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "missing"]
        text = "; ".join(_describe(e, data) for e in errors if e["type"] != "missing")[:600]
        parts = ([f"missing fields: {', '.join(missing)}"] if missing else []) + ([text] if text else [])
        raise InputError(
            f"{source}: {'; '.join(parts)}", hint="see docs/decide.md for every field and its unit"
        ) from None


def load_requirements(path: str | os.PathLike[str]) -> Requirements:
    p = Path(path)
    return parse_requirements(load_yaml(p, "requirements file", hint="see examples/requirements-testbed.yaml"), str(p))
