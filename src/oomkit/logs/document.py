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

import codecs
import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from oomkit.logs.envelope import record_text

# A document is parsed as it is read, an entry at a time, but its entries are held until the end (they are put in
# time order): past this size the file is read as text lines, with a warning saying how to export it one entry a line,
# which is streamed.
DOCUMENT_MAX_BYTES = 1 << 30
# A document's opening: an array of objects (or an empty one), or an object whose first key names its entries.
OPENING = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:\[\s*[{\]]|\{\s*\"[\w@.\-]+\"\s*:)")
# Where an object document keeps its entries: AWS's "events", an Elasticsearch response's inner "hits" (looked for in
# the document's first HEAD_CHARS: an export's metadata before its entries is short).
ENTRY_ARRAYS = re.compile(r'"(?:events|hits|entries|logs|records)"\s*:\s*\[')
HEAD_CHARS = 1 << 20
TIME_KEYS = ("timestamp", "@timestamp", "time", "ts")
SPACE = re.compile(r"\s*")


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry's text (its lines joined by newlines), how many lines it holds, and its time as seconds (None when it
    has none)."""

    text: str
    lines: int
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
    return read_document(iter((text.encode("utf-8", "replace"),)))


def read_document(chunks: Iterator[bytes]) -> Document | None:
    """`decode_document` over a file read a chunk at a time: only the entries' text is held, never the whole JSON."""
    entries = _entries(_Stream(chunks))
    if not entries or not any(entry.lines for entry in entries):
        return None
    ordered = _in_time_order(entries)
    texts = [entry.text for entry in ordered if entry.lines]
    count = sum(entry.lines for entry in ordered)
    body = ("\n".join(texts) + "\n").encode("utf-8", "replace")
    return Document(body, array("q", range(1, count + 1)), len(entries))


def _entries(stream: _Stream) -> list[Entry] | None:
    entries: list[Entry] = []
    with_text = 0
    try:
        if not stream.open_array():
            return None
        for value in stream.values():
            if not isinstance(value, dict):
                return None  # not a log's entries (a list of numbers or names): read the file as text
            unwrapped = record_text(value)
            with_text += unwrapped is not None
            # An entry whose text is empty is a blank line the server printed: kept, so the numbering is the log's.
            lines = (unwrapped.lines or ("",)) if unwrapped is not None else ()
            entries.append(Entry("\n".join(lines), len(lines), _seconds(value)))
    except (ValueError, IndexError, RecursionError):  # cut short, or nested deeper than the decoder recurses
        return None
    # Most entries hold text (an export may carry a few audit entries): else this is not a log (a config, a report).
    return entries if with_text * 2 >= len(entries) else None


class _Stream:
    """A document's text, decoded as its bytes arrive; what was parsed is dropped at each refill, so only the entry
    being parsed and one chunk are held."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks = chunks
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.json = json.JSONDecoder()
        self.text = ""
        self.pos = 0
        self.ended = False

    def more(self, at_least: int = 1) -> None:
        """At least `at_least` more characters appended (or all that is left: then `ended` is set), what was parsed
        dropped."""
        parts = [self.text[self.pos :]]
        added = 0
        while added < at_least and not self.ended:
            chunk = next(self.chunks, None)
            parts.append(self.utf8.decode(chunk or b"", final=chunk is None))
            added += len(parts[-1])
            self.ended = chunk is None
        self.text = "".join(parts)
        self.pos = 0

    def open_array(self) -> bool:
        """Moves past the opening of the entries' array: the document's own "[", or an object's entry key."""
        while len(self.text) < HEAD_CHARS and not self.ended:
            self.more()
        stripped = len(self.text) - len(self.text.lstrip("\ufeff \t\r\n"))
        if self.text[stripped : stripped + 1] == "[":
            self.pos = stripped + 1
            return True
        found = ENTRY_ARRAYS.search(self.text, 0, HEAD_CHARS)
        self.pos = found.end() if found else self.pos
        return found is not None

    def values(self) -> Iterator[object]:
        """Each value of the array, one at a time (the JSON decoder's C scanner reads each); a document cut short
        raises ValueError."""
        if self.peek() == "]":
            return
        while True:
            yield self.value()
            mark = self.peek()
            if mark == "]":
                return
            if mark != ",":
                raise ValueError(f"expected ',' at {self.pos}")
            self.pos += 1
            self.peek()  # to the next value's first character: the decoder does not skip white space

    def peek(self) -> str:
        """The next character that is not white space (refilling as needed); ValueError at the end of the file."""
        while True:
            self.pos = _skip_space(self.text, self.pos)
            if self.pos < len(self.text):
                return self.text[self.pos]
            if self.ended:
                raise ValueError("the document ends before its entries do")
            self.more()

    def value(self) -> object:
        while True:
            try:
                value, end = self.json.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as err:
                if self.ended or not _maybe_cut(err, len(self.text)):
                    raise
                # The value runs past what was read: read as much again (a long entry is parsed a few times, not once
                # a chunk) and parse it again.
                self.more(at_least=len(self.text) - self.pos)
                continue
            self.pos = end
            return value


def _maybe_cut(err: json.JSONDecodeError, held: int) -> bool:
    """The decoder stopped at the end of what was read (a value that goes on in the next chunk), not at a fault in
    the middle: a string still open, or a failure within a token's length of the end."""
    return err.msg.startswith("Unterminated string") or err.pos >= held - 16


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
