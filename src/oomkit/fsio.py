"""Writes that never leave half a record: JSON by write-then-rename, JSONL by whole flushed lines;
reads of handed-over files that refuse, in one line, what is too large, binary or not UTF-8; and
the narrowing of JSON read back (`json_object`, `json_list`, `from_fields`): a file an earlier
stage wrote is raw input until its fields are checked, since it may be torn, edited or older."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from oomkit.errors import InputError
from oomkit.serial import Json, JsonObject

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")

JSON_ERRORS = (ValueError, RecursionError)
"""What json.loads raises on bad input: JSONDecodeError (a ValueError), ValueError for an integer of
more than 4,300 digits, RecursionError for `[[[[...` nesting."""


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str, ensure_ascii=False)


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:  # `\ud800` stays JSON
            fh.write(dumps(obj) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        # A lone surrogate (`"\ud800"` in a JSON file read back) cannot be UTF-8: write it as `\ud800`.
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


class JsonlWriter:
    """Appends one JSON object per line; each line is written with a single write() and flushed."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8", errors="backslashreplace")  # as write_json_atomic

    def append(self, obj: Any) -> None:
        self._fh.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | os.PathLike[str]) -> list[JsonObject]:
    """Reads whole records; a torn last line (a crash mid-write) is skipped, not fatal."""
    records: list[JsonObject] = []
    p = Path(path)
    if not p.exists():
        return records
    with open(p, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except JSON_ERRORS:
                continue
            if isinstance(obj, dict):
                records.append(obj)
    return records


def json_object(value: Json | None) -> JsonObject:
    """A field of JSON read back, as `value or {}` reads it: {} for a missing, null or empty field,
    the object itself, and TypeError for anything else (an edited file: WRONG_SHAPE covers it)."""
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    raise TypeError(f"a JSON object expected, not {type(value).__name__}")


def json_list(value: Json | None) -> list[Json]:
    """A field of JSON read back, as `value or []` reads it; TypeError for a non-list, as `json_object`."""
    if isinstance(value, list):
        return value
    if not value:
        return []
    raise TypeError(f"a JSON list expected, not {type(value).__name__}")


def json_objects(value: Json | None) -> list[JsonObject]:
    """A list field whose items are objects, each read as `json_object` reads it."""
    return [json_object(v) for v in json_list(value)]


def from_fields(cls: type[D], data: Mapping[str, object], **given: object) -> D:
    """The dataclass `cls` from a JSON object its own writer wrote (`asdict`, `to_dict`): the keys
    that name a field, then `given` on top (what JSON cannot hold as it was: tuples, nested
    classes). The constructor checks the names (TypeError for a missing one, which WRONG_SHAPE
    covers); the values are the writer's and are not checked again."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{**{k: v for k, v in data.items() if k in names}, **given})


def read_text_limited(path: str | os.PathLike[str], limit_bytes: int, what: str, hint: str | None = None) -> str:
    """The UTF-8 text of a file a person wrote or handed over, or one InputError line saying why not:
    missing, unreadable, larger than `limit_bytes`, binary (a NUL byte) or not UTF-8. At most
    limit_bytes + 1 bytes are read, so /dev/zero or a mistyped path to a model file is cheap. It reads
    in chunks: `fh.read(limit + 1)` reserves a buffer of the limit at once, which fails under a
    `ulimit -v` (batch schedulers, some containers) even for a 3-byte file."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = _read_at_most(fh, limit_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"{p}: no such {what}", hint=hint) from None
    except OSError as err:  # a folder, no permission, an I/O error
        raise InputError(f"{p}: cannot read the {what} ({err.strerror or err})", hint=hint) from None
    except ValueError:  # a path with a NUL byte, e.g. read from a damaged file
        raise InputError(f"{str(p)!r}: not a usable path for a {what} (it holds a NUL byte)", hint=hint) from None
    if len(data) > limit_bytes:
        raise InputError(
            f"{p}: more than {_size(limit_bytes)}, the limit for a {what}",
            hint=hint or f"a {what} is a short text file: check that this is the right path",
        )
    if b"\x00" in data:
        raise InputError(f"{p}: a binary file (NUL byte at offset {data.index(0):,}), not a {what}", hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{p}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start:,})",
            hint=hint or f"save the {what} as UTF-8",
        ) from None


_READ_CHUNK_BYTES = 1 << 20


def _read_at_most(fh: BinaryIO, max_bytes: int) -> bytes:
    """What the file holds, up to max_bytes, never allocating more than one chunk beyond it."""
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        chunk = fh.read(min(_READ_CHUNK_BYTES, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:g} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:g} MiB"


def is_file(path: object) -> bool:
    """Path(path).is_file() for a path read from a file: a name too long for the file system
    (ENAMETOOLONG), a NUL byte or a non-string is no file, not an error."""
    try:
        return isinstance(path, (str, os.PathLike)) and Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: object) -> bool:
    """Path(path).is_dir(), as `is_file`."""
    try:
        return isinstance(path, (str, os.PathLike)) and Path(path).is_dir()
    except (OSError, ValueError):
        return False
