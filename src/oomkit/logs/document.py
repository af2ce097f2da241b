"""A log exported as one JSON document rather than one record a line: `gcloud logging read --format=json` (an array
of LogEntry objects, newest first unless `--order=asc`), `aws logs filter-log-events` and `aws logs get-log-events`
(`{"events": [{"timestamp": ms, "message": ...}]}`), an Elasticsearch search response (`{"hits": {"hits": [...]}}`)
and any pretty-printed array of records (`jq '.'` of a collector's records). Each entry's text is read as the log's
lines (`envelope.py` finds it: `textPayload`, `jsonPayload.message`, `message`, `_source.message`, ...), in time order:
a traceback split into one entry a line reads as the traceback, and the last marker before the error is the one printed
before it, whatever order the export chose. Lines are numbered as the log the entries hold (its lines, oldest first),
not as the JSON file's: triage reads adjacent lines as adjacent (a frame wrapped onto the next line), and the numbers
are those of the log as the server printed it."""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from oomkit.logs.envelope import record_text

# The whole document is parsed in memory: past this size the file is read as text lines (with a warning saying how to
# export it one entry a line, which is streamed).
DOCUMENT_MAX_BYTES = 64 << 20
# A document's opening: an array of objects (or an empty one), or an object whose first key names its entries.
OPENING = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:\[\s*[{\]]|\{\s*\"[\w@.\-]+\"\s*:)")
# Where an object document keeps its entries: AWS's "events", an Elasticsearch response's inner "hits".
ENTRY_ARRAYS = re.compile(r'"(?:events|hits|entries|logs|records)"\s*:\s*\[')
TIME_KEYS = ("timestamp", "@timestamp", "time", "ts")
SPACE = re.compile(r"\s*")


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry's text lines and its time as seconds (None when it has none)."""

    lines: tuple[str, ...]
    seconds: float | None


def looks_like_document(head: bytes) -> bool:
    """The file opens as a JSON document of entries (checked by parsing it: a plain log that happens to open with
    "[{" is read as text)."""
    return OPENING.match(head) is not None


@dataclass(frozen=True)
class Document:
    """The entries' text lines, oldest first (newline-ended), each numbered by its place among them (`where`), and
    how many entries the export held."""

    text: bytes
    where: array
    entries: int


def decode_document(text: str) -> Document | None:
    """The document's entries as text lines in time order; None when the text is not a JSON document of log
    entries."""
    entries = _entries(text)
    if not entries or not any(entry.lines for entry in entries):
        return None
    lines = [line for entry in _in_time_order(entries) for line in entry.lines]
    body = ("\n".join(lines) + "\n").encode("utf-8", "replace")
    return Document(body, array("q", range(1, len(lines) + 1)), len(entries))


def _entries(text: str) -> list[Entry] | None:
    start = _array_start(text)
    if start is None:
        return None
    entries: list[Entry] = []
    with_text = 0
    try:
        for value in _items(text, start):
            if not isinstance(value, dict):
                return None  # not a log's entries (a list of numbers or names): read the file as text
            unwrapped = record_text(value)
            with_text += unwrapped is not None
            # An entry whose text is empty is a blank line the server printed: kept, so the numbering is the log's.
            lines = (unwrapped.lines or ("",)) if unwrapped is not None else ()
            entries.append(Entry(lines, _seconds(value)))
    except (ValueError, IndexError, RecursionError):  # cut short, or nested deeper than the decoder recurses
        return None
    # Most entries hold text (an export may carry a few audit entries): else this is not a log (a config, a report).
    return entries if with_text * 2 >= len(entries) else None


def _array_start(text: str) -> int | None:
    stripped = len(text) - len(text.lstrip("\ufeff \t\r\n"))
    if text[stripped : stripped + 1] == "[":
        return stripped
    found = ENTRY_ARRAYS.search(text)
    return found.end() - 1 if found else None


def _items(text: str, start: int) -> Iterator[object]:
    """Each value of the array opening at `start`, one at a time (the JSON decoder's C scanner reads each value; a
    document cut short raises ValueError)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, start + 1)
    if text[pos] == "]":
        return
    while True:
        value, end = decoder.raw_decode(text, pos)
        yield value
        pos = _skip_space(text, end)
        if text[pos] == "]":
            return
        if text[pos] != ",":
            raise ValueError(f"expected ',' at {pos}")
        pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    found = SPACE.match(text, pos)
    return found.end() if found else pos


def _seconds(value: object) -> float | None:
    """An entry's time: RFC 3339 text (Cloud Logging, Elasticsearch) or an epoch number (CloudWatch's milliseconds)."""
    if not isinstance(value, dict):
        return None
    holders = [value, *(inner for inner in (value.get("_source"),) if isinstance(inner, dict))]
    for holder in holders:
        for key in TIME_KEYS:
            stamp = holder.get(key)
            if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
                return _epoch_seconds(float(stamp))
            if isinstance(stamp, str):
                return _parsed_time(stamp)
    return None


def _epoch_seconds(stamp: float) -> float:
    """Epoch seconds, milliseconds (CloudWatch), microseconds or nanoseconds (Loki), told apart by size."""
    for scale in (1e9, 1e6, 1e3):
        if stamp > 1e8 * scale:  # 1e8 s is 1973: no log is older, and none is stamped after 5138
            return stamp / scale
    return stamp


def _parsed_time(stamp: str) -> float | None:
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _in_time_order(entries: list[Entry]) -> list[Entry]:
    """Oldest first. An export listed newest first (gcloud's default) is turned round before the sort, so entries
    that share a time (the lines of one traceback) keep the order they were written in."""
    if any(entry.seconds is None for entry in entries):
        return entries
    first, last = entries[0].seconds, entries[-1].seconds
    ordered = entries[::-1] if first is not None and last is not None and first > last else entries
    return sorted(ordered, key=lambda entry: entry.seconds or 0.0)
