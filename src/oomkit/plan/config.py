"""Reading a model's config.json: the raw JSON object, and a reader that narrows each field to the
type the planner needs (a number, a flag, a text, an object) or names the missing one with the flag
that supplies it. oomkit.plan.model builds the shape from it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from oomkit.errors import InputError
from oomkit.fsio import JSON_ERRORS, read_text_limited
from oomkit.serial import JsonObject

CONFIG_LIMIT_BYTES = 8 * 2**20  # a config.json is a few KB (the largest fixture: 9.5 KB)


def as_int(value: object) -> int:
    """A config number as an int; a list, an object or null is the wrong type (TypeError, which
    shape_from_config turns into an InputError naming it)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return int(value)


class ConfigReader:
    """Reads config fields, narrowed to the type the planner needs, and names a missing one together
    with the flag that supplies it."""

    def __init__(self, data: Mapping[str, object], where: str):
        self.data, self.where = data, where

    def get(self, *keys: str) -> object:
        """The first of `keys` the config sets (not null), else None."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        return None

    def num(self, *keys: str, default: int) -> int:
        value = self.get(*keys)
        return default if value is None else as_int(value)

    def opt_num(self, *keys: str) -> int | None:
        value = self.get(*keys)
        return None if value is None else as_int(value)

    def need_num(self, *keys: str, flag: str | None = None) -> int:
        return as_int(self.need(*keys, flag=flag))

    def text(self, *keys: str, default: str) -> str:
        value = self.get(*keys)
        return default if value is None else str(value)

    def opt_text(self, *keys: str) -> str | None:
        value = self.get(*keys)
        return None if value is None else str(value)

    def first(self, key: str) -> str | None:
        """The first entry of a list field (`architectures`), as text."""
        value = self.get(key)
        return str(value[0]) if isinstance(value, list) and value else None

    def flag(self, *keys: str) -> bool:
        return bool(self.get(*keys))

    def mapping(self, key: str) -> Mapping[str, object] | None:
        value = self.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{key} is a {type(value).__name__}, not an object")
        return value

    def whole(self, *keys: str, name: str) -> int | None:
        """A field the shape keeps as given: a whole number or nothing (_check_counts bounds it)."""
        value = self.get(*keys)
        if value is None or isinstance(value, int):
            return value
        raise InputError(
            f"{self.where}: {name} must be a whole number up to 2**40, not a {type(value).__name__}",
            hint="compare it with the model's config.json on the Hub, or fix it with --hf-overrides",
        )

    def ints(self, key: str) -> set[int]:
        """The whole numbers of a list field (layer indices); anything else in it matches no layer."""
        value = self.get(key)
        return {v for v in value if isinstance(v, int)} if isinstance(value, list) else set()

    def need(self, *keys: str, flag: str | None = None) -> object:
        value = self.get(*keys)
        if value is None:
            supply = flag or f"--hf-overrides '{{\"{keys[0]}\": ...}}'"
            raise InputError(
                f"{self.where} has no `{keys[0]}`, which the planner needs",
                hint=f"add it to the config or pass {supply}",
            )
        return value


def load_config(path: str | Path) -> JsonObject:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InputError(f"no config.json at {path}", hint="pass a model directory, a config.json, or a catalog name")
    try:
        data = json.loads(read_text_limited(p, CONFIG_LIMIT_BYTES, "model config.json"))
    except JSON_ERRORS as err:
        raise InputError(f"{p} is not valid JSON: {str(err)[:200]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{p} does not hold a JSON object")
    return data
