"""The workload file (YAML, strict): agent sessions and what each of their requests is made of.

Every size is in tokens of the server's tokenizer, either a number or a `[min, max]` range drawn
per session/step from the seed. Unknown keys, wrong types and impossible values are errors that
name the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oomkit.errors import InputError
from oomkit.yamlio import load_yaml

TokenSize = int | list[int]
ParamType = Literal["integer", "number", "boolean", "enum", "string"]
PARAM_TYPES: tuple[ParamType, ...] = ("integer", "number", "boolean", "enum", "string")
DEFAULT_PARAM_TYPES: tuple[ParamType, ...] = ("integer", "enum", "string")
MAX_TOKENS_PER_PART = 2_000_000
DEFAULT_WORKLOAD = {"name": "default-agent"}  # every other field at its default (docs/load.md)


def _check_size(v: TokenSize) -> TokenSize:
    if isinstance(v, list):
        if len(v) != 2 or v[0] > v[1]:
            raise ValueError("a range is [min, max] with min <= max")
        lo, hi = v
    else:
        lo = hi = v
    if lo < 0 or hi > MAX_TOKENS_PER_PART:
        raise ValueError(f"token sizes are between 0 and {MAX_TOKENS_PER_PART:,}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolsSpec(_Strict):
    count: int = Field(default=4, ge=0, le=256, description="tool definitions sent with every request")
    schema_tokens: TokenSize = Field(
        default=80, description="tokens of one tool definition (name, description, parameters)"
    )
    strict: bool = Field(
        default=False, description='mark every tool "strict": true (vLLM then enforces the argument schema)'
    )
    choice: Literal["auto", "required", "none", "named"] = Field(
        default="required", description="tool_choice; named picks one tool per step"
    )
    parameter_types: list[ParamType] = Field(default_factory=lambda: list(DEFAULT_PARAM_TYPES), min_length=1)

    _size = field_validator("schema_tokens")(_check_size)


class HistorySpec(_Strict):
    assistant_action_tokens: TokenSize = Field(
        default=60, description="assistant text of each earlier step (plus its call)"
    )
    tool_result_tokens: TokenSize = Field(default=200, description="tool result of each earlier step")

    _size = field_validator("assistant_action_tokens", "tool_result_tokens")(_check_size)


class Workload(_Strict):
    name: str = Field(min_length=1, max_length=80)
    seed: int = 0
    sessions: int = Field(default=8, ge=1, le=100_000, description="agent sessions in the request set")
    steps: int = Field(default=4, ge=1, le=1_000, description="agent steps (requests) per session")
    system_instruction_tokens: TokenSize = 500
    format_rules_tokens: TokenSize = 100
    prefix_reuse: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description=("share of the system prompt (instruction + rules) identical across sessions"),
    )
    user_task_tokens: TokenSize = 60
    workflow_metadata_tokens: TokenSize = 30
    tools: ToolsSpec = Field(default_factory=ToolsSpec)
    history: HistorySpec = Field(default_factory=HistorySpec)
    output_tokens: TokenSize = 128
    ignore_eos: bool = Field(default=False, description="vLLM extension: always generate output_tokens")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)

    _size = field_validator(
        "system_instruction_tokens",
        "format_rules_tokens",
        "user_task_tokens",
        "workflow_metadata_tokens",
        "output_tokens",
    )(_check_size)


def _where(loc: tuple[object, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_workload(data: object, origin: str = "workload") -> Workload:
    if not isinstance(data, dict):
        raise InputError(
            f"{origin}: a workload is a YAML mapping, not {type(data).__name__}",
            hint="see examples/workload-agent.yaml",
        )
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(
            f"{origin}: field {_where(first['loc'])}: {msg}{more}",
            hint="fix the field; see docs/load.md for the workload format",
        ) from None


# A chain of `extends:` longer than this is a loop or a mistake, not a real workload family.
MAX_EXTENDS = 4


def _with_base(data: object, path: Path, depth: int) -> object:
    """`extends: other.yaml` (relative to this file): that workload, with this file's fields on top;
    nested mappings (tools, history) merge key by key. One file then states only what differs,
    e.g. the greedy variant of a workload."""
    if not isinstance(data, dict) or "extends" not in data:
        return data
    if depth >= MAX_EXTENDS:
        raise InputError(f"{path}: `extends` goes deeper than {MAX_EXTENDS} files", hint="is there a loop?")
    if not isinstance(data["extends"], str) or not data["extends"].strip():
        raise InputError(f"{path}: field extends: the path of another workload file", hint="see docs/load.md")
    base_path = path.parent / data["extends"]
    base = _with_base(load_yaml(base_path, "workload file (extends)"), base_path, depth + 1)
    if not isinstance(base, dict):
        return base  # parse_workload names the type
    merged = dict(base)
    for key, value in data.items():
        if key == "extends":
            continue
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = {**merged[key], **value} if both_maps else value
    return merged


def load_workload(path: str | os.PathLike[str]) -> Workload:
    p = Path(path)
    return parse_workload(_with_base(load_yaml(p, "workload file"), p, 0), str(p))
