"""The one way oomkit reads a YAML file a person wrote: profiles, workloads, requirements,
experiments and recipes. Each is a few KB; a file over YAML_LIMIT_BYTES is refused before PyYAML
sees it (its pure-Python parser takes about a CPU second per MiB), as are binary and non-UTF-8
files and documents nested deeper than PyYAML's recursive composer can follow."""

from __future__ import annotations

import os
from typing import Any

import yaml

from oomkit.errors import InputError
from oomkit.fsio import read_text_limited

YAML_LIMIT_BYTES = 2**20
"""1 MiB: the examples are 0.6-1.5 KB and the largest vLLM recipe in the fixtures is 16 KB."""
VALUES_LIMIT = 200_000
"""Values in a document once its aliases are expanded: `&a [*b, *b, ...]` chains grow exponentially."""


def load_yaml(
    path: str | os.PathLike[str], what: str, hint: str | None = None, loader: type[yaml.SafeLoader] = yaml.SafeLoader
) -> Any:
    """The parsed document of a file, or one InputError line: missing, too large, binary, not YAML."""
    return parse_yaml(read_text_limited(path, YAML_LIMIT_BYTES, what, hint), str(path), hint, loader)


def parse_yaml(text: str, source: str, hint: str | None = None, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 — SafeLoader or a subclass of it
    except yaml.YAMLError as err:
        raise InputError(f"{source}: not valid YAML: {_where(err)}", hint=hint) from None
    except RecursionError:  # `[[[[...` or `a: {b: {c: ...`: PyYAML composes nodes recursively
        raise InputError(f"{source}: nested too deeply to be a hand-written YAML file", hint=hint) from None
    except (ValueError, TypeError, AttributeError, OverflowError) as err:
        # PyYAML's constructors: `2026-13-45`, `!!int x`, `!!timestamp x`, an int of over 4,300 digits
        raise InputError(
            f"{source}: not valid YAML: a value cannot be read ({type(err).__name__}: {err})"[:300], hint=hint
        ) from None
    if _expands_past(data, VALUES_LIMIT):
        raise InputError(
            f"{source}: more than {VALUES_LIMIT:,} values once its aliases (*name) are expanded, "
            "or an alias that contains itself",
            hint=hint,
        )
    return data


def _expands_past(data: Any, limit: int) -> bool:
    """Counts values as a reader walking the document meets them, aliases included; stops at `limit`."""
    stack, seen = [data], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(node, dict):
            stack += node.values()
        elif isinstance(node, (list, set)):
            stack += node
    return False


def _where(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem
