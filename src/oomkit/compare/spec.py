"""The experiment file (YAML, strict): a baseline (profile, request set, concurrency) and variants
that each change exactly one factor. A variant that changes two factors is refused, naming both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeGuard, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oomkit.compare.document import ModeDoc, Setting
from oomkit.compare.factors import BY_NAME, CLIENT, RETENTION, RETENTION_ENV, canonical
from oomkit.errors import InputError
from oomkit.serial import Json
from oomkit.yamlio import load_yaml

RESETS = ("auto", "endpoint", "salt", "none")
BASELINE = "baseline"


class VariantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9._-]+$")
    # As the file writes it: resolve_variant checks the factor and the type of its value.
    set: dict[str, object] = Field(description="the one factor this variant changes, and its value")
    note: str | None = None


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80)
    profile: str = Field(description="launch profile of the baseline server (relative to this file)")
    workload: str | None = Field(
        default=None, description="workload YAML or request-set.jsonl (default: built-in agent)"
    )
    concurrency: int = Field(ge=1, le=4096, description="agent sessions at once in the baseline")
    sessions: int | None = Field(
        default=None, ge=1, le=100_000, description="sessions per cell (default: all of the set)"
    )
    steps: int | None = Field(default=None, ge=1, le=1000, description="agent steps per session (default: all)")
    repeats: int = Field(default=2, ge=1, le=20, description="cells per mode; verdicts compare the repeat ranges")
    reset: Literal["auto", "endpoint", "salt", "none"] = Field(
        default="auto", description="between cells: /reset_prefix_cache (endpoint), a per-cell cache_salt, or none"
    )
    variants: list[VariantSpec] = Field(default_factory=list)
    source: str | None = Field(default=None, exclude=True)

    @field_validator("variants")
    @classmethod
    def _unique(cls, value: list[VariantSpec]) -> list[VariantSpec]:
        names = [v.name for v in value]
        dup = sorted({n for n in names if names.count(n) > 1 or n == BASELINE})
        if dup:
            raise ValueError(f"variant names must be unique and not {BASELINE!r}: {', '.join(dup)}")
        return value

    @overload
    def path(self, value: str) -> str: ...
    @overload
    def path(self, value: None) -> None: ...
    def path(self, value: str | None) -> str | None:
        """A path from the file, relative to the file's folder."""
        if value is None or Path(value).is_absolute() or self.source is None:
            return value
        return str((Path(self.source).parent / value).resolve())


@dataclass(frozen=True)
class Mode:
    """One cell kind: the baseline, or a variant with its single changed factor."""

    name: str
    factor: str | None = None
    value: Setting = None
    side: str | None = None
    """client or server; None for the baseline."""
    baseline_value: Json = None
    """The profile's own value of the factor (None: not set there)."""
    notes: tuple[str, ...] = ()

    def whole(self) -> int:
        """The value of a whole-number factor (history_turns, context_factor, output_tokens, concurrency)."""
        if self.value is None:
            raise TypeError(f"mode {self.name!r} sets no value")
        return int(self.value)

    def to_dict(self) -> ModeDoc:
        return {
            "name": self.name,
            "factor": self.factor,
            "value": self.value,
            "side": self.side,
            "baseline_value": self.baseline_value,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Plan:
    spec: ExperimentSpec
    modes: tuple[Mode, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def server_modes(self) -> tuple[Mode, ...]:
        return tuple(m for m in self.modes if m.side == "server")

    def same_server_modes(self) -> tuple[Mode, ...]:
        return tuple(m for m in self.modes if m.side != "server")


def _value_ok(value: object, factor: str) -> TypeGuard[Setting]:
    kind = BY_NAME[factor].kind
    if factor == RETENTION:
        return (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or value in ("None", None)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def resolve_variant(v: VariantSpec, baseline: Mapping[str, Json], origin: str) -> Mode:
    """The variant's one factor, checked: known, one only, a valid value, not the baseline's."""
    names = {canonical(k): k for k in v.set}
    if len(v.set) != 1 or len(names) != 1:
        listed = " and ".join(f"`{k}`" for k in v.set) or "nothing"
        raise InputError(
            f"{origin}: variant {v.name!r} changes {len(v.set)} factors ({listed}); a variant "
            "changes exactly one factor",
            hint="split it into one variant per factor",
        )
    ((factor, written),) = names.items()
    if factor not in BY_NAME:
        raise InputError(
            f"{origin}: variant {v.name!r}: unknown factor `{written}`", hint=f"one of {', '.join(sorted(BY_NAME))}"
        )
    value = v.set[written]
    if factor == RETENTION and isinstance(value, str) and value.isdigit():
        value = int(value)
    if not _value_ok(value, factor):
        raise InputError(
            f"{origin}: variant {v.name!r}: {factor} = {value!r} is not a valid value", hint=BY_NAME[factor].meaning
        )
    setting: Setting = "None" if factor == RETENTION and value is None else value
    if _same(baseline.get(factor), setting):
        raise InputError(
            f"{origin}: variant {v.name!r} sets {factor} to {setting!r}, the baseline's own value: it changes nothing",
            hint="give another value, or remove the variant",
        )
    notes = (f"written as {written}: {RETENTION_ENV} is recognised as {RETENTION}",) if written == RETENTION_ENV else ()
    return Mode(
        v.name, factor, setting, BY_NAME[factor].side, baseline.get(factor), notes + ((v.note,) if v.note else ())
    )


def _same(a: Json, b: Setting) -> bool:
    return a is not None and str(a) == str(b)


def baseline_values(spec: ExperimentSpec, profile_args: Mapping[str, Json]) -> dict[str, Json]:
    base = {k: profile_args.get(k) for k, f in BY_NAME.items() if f.side != CLIENT}
    base.update(concurrency=spec.concurrency, history_turns=None, context_factor=1, output_tokens=None)
    return base


def plan_experiment(spec: ExperimentSpec, profile_args: Mapping[str, Json]) -> Plan:
    origin = spec.source or spec.name
    base = baseline_values(spec, profile_args)
    modes = [Mode(BASELINE)] + [resolve_variant(v, base, origin) for v in spec.variants]
    return Plan(spec, tuple(modes))


def parse_experiment(data: object, source: str = "<experiment>") -> ExperimentSpec:
    if not isinstance(data, dict):
        raise InputError(
            f"{source}: an experiment is a YAML mapping with name, profile, concurrency, variants",
            hint="see examples/experiment-cache-vs-context.yaml",
        )
    try:
        return ExperimentSpec.model_validate({**data, "source": source})
    except ValidationError as err:
        raise InputError(f"{source}: {describe(err)}", hint="see docs/decide.md for the experiment format") from None


def describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:4]:
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "missing":
            parts.append(f"missing field `{where}`")
        elif e["type"] == "extra_forbidden":
            parts.append(f"unknown field `{where}`")
        else:
            parts.append(f"`{where}`: {str(e['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def load_experiment(path: str | os.PathLike[str]) -> ExperimentSpec:
    p = Path(path)
    return parse_experiment(load_yaml(p, "experiment file"), str(p))
