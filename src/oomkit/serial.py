"""One way from computed facts to JSON: a frozen dataclass becomes an object keyed by its field
names, and Paths, tuples, enums and mappings inside it become plain JSON values. A result whose
JSON shape is its fields then needs no hand-written `to_dict()` that can drift from the class."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import PurePath

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
"""A value `json.dumps` writes as is."""

JsonObject = dict[str, Json]


def to_jsonable(obj: object) -> Json:
    """`obj` as plain JSON values; raises TypeError for anything JSON has no form for."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"no JSON form for {type(obj).__name__}")


def to_json_object(obj: object) -> JsonObject:
    """A dataclass (or mapping) as a JSON object: the form a result's `to_dict()` returns."""
    out = to_jsonable(obj)
    if not isinstance(out, dict):
        raise TypeError(f"{type(obj).__name__} is not an object in JSON")
    return out


def number_at(obj: Mapping[str, object], key: str) -> float | None:
    """`obj[key]` as a float when it is a JSON number (not a bool), else None: a figure read back from a
    file another tool or stage wrote, where a missing or odd value is "not known", not an error."""
    value = obj.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
