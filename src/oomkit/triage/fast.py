"""The block prefilter. RE2 (google-re2, a dependency) runs the key as a DFA at several hundred
MB/s. Where it cannot be installed (a platform with no wheel), or with OOMKIT_PREFILTER=re, the key
runs as what it is, an alternation of literals and two short patterns: each literal is found with
`bytes.find` (C, skipping by the literal's length) and the patterns with Python's re, which reads
the same lines several times faster than re trying the many-way alternation at every byte."""

from __future__ import annotations

import heapq
import mmap
import os
import re
from functools import lru_cache
from typing import NamedTuple

from oomkit.logs.reader import whole_lines_end
from oomkit.triage.literals import distinct_literals
from oomkit.triage.prefilter import ENVELOPE_FIELD, NEEDS, PRESSURE

KEY_DFA_BYTES = 64 << 20


@lru_cache(maxsize=1)
def scan_key() -> re.Pattern[bytes] | LiteralKey:
    if os.environ.get("OOMKIT_PREFILTER") == "re":
        return literal_key()
    try:
        import re2
    except ImportError:
        return literal_key()
    from oomkit.triage.prefilter import KEY_PATTERN

    options = re2.Options()
    # RE2's default budget (8 MiB) holds the key's DFA only just: past it RE2 logs "DFA out of memory" on every search
    # and runs the slower NFA. The key has no groups a caller reads.
    options.max_mem = KEY_DFA_BYTES
    options.never_capture = True
    try:
        compiled: re.Pattern[bytes] = re2.compile(KEY_PATTERN.encode(), options)
    except Exception:  # noqa: BLE001 - an RE2 build that rejects the pattern falls back to re
        return literal_key()
    return compiled


def engine_name() -> str:
    return "re" if isinstance(scan_key(), LiteralKey) else "re2"


def literal_key() -> LiteralKey:
    """KEY_PATTERN's parts: its literals (case-folded ones, or any holding a newline, as patterns) and its patterns."""
    literals, patterns = [], [PRESSURE, ENVELOPE_FIELD]
    for lit in distinct_literals(NEEDS):
        if lit.ignore_case or "\n" in lit.text:
            patterns.append(f"(?i:{re.escape(lit.text)})" if lit.ignore_case else re.escape(lit.text))
        else:
            literals.append(lit.text.encode())
    return LiteralKey(tuple(literals), tuple(re.compile(p.encode()) for p in patterns))


class Found(NamedTuple):
    """Where a part of the key matched: the subset of re.Match the reader uses."""

    begin: int
    finish: int

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish


class LiteralKey:
    """The key as an alternation of literals and patterns, searched part by part: `search(buf, pos, endpos)` as re's
    (the earliest match of any part). A reader walking one buffer takes a `cursor` on it, which keeps each part's next
    match, searched for up to a horizon of whole lines ahead (a rule's text never spans lines, so no match straddles
    it): a buffer then costs one search per part and horizon plus one per match, whatever windows the reader passes.
    Each rank's stream takes its own cursor, so streams read in turn do not undo each other's."""

    def __init__(self, literals: tuple[bytes, ...], patterns: tuple[re.Pattern[bytes], ...]):
        self.literals = literals
        self.patterns = patterns

    def cursor(self, buf: bytes | mmap.mmap) -> Cursor:
        return Cursor(self, buf)

    def search(self, buf: bytes | mmap.mmap, pos: int = 0, endpos: int | None = None, /) -> Found | None:
        return self.cursor(buf).search(pos, len(buf) if endpos is None else endpos)


class Cursor:
    """One buffer's search state: a heap of (start, end, part) for every part of the key; end -1 says the part has no
    match before `start`, the horizon it was searched to."""

    def __init__(self, key: LiteralKey, buf: bytes | mmap.mmap):
        self.key = key
        self.buf = buf
        self.pos = -1
        self.heap: list[tuple[int, int, int]] = []

    def search(self, pos: int, endpos: int) -> Found | None:
        buf, heap = self.buf, self.heap
        stop = min(endpos, len(buf))
        if pos < self.pos or self.pos < 0:
            horizon = _horizon(buf, pos)
            heap[:] = [
                self._find(part, pos, horizon) for part in range(len(self.key.literals) + len(self.key.patterns))
            ]
            heapq.heapify(heap)
        self.pos = pos
        while heap:
            start, end, part = heap[0]
            if start < pos or (end < 0 and start < stop):  # behind pos, or searched only up to a horizon before stop
                origin = max(start, pos)
                heapq.heapreplace(heap, self._find(part, origin, _horizon(buf, origin)))
                continue
            # the earliest match, or every part's horizon at or past stop: no match before it
            return Found(start, end) if start < stop and end >= 0 else None
        return None

    def _find(self, part: int, pos: int, horizon: int) -> tuple[int, int, int]:
        literals = self.key.literals
        if part < len(literals):
            at = self.buf.find(literals[part], pos, horizon)
            return (at, at + len(literals[part]), part) if at >= 0 else (horizon, -1, part)
        match = self.key.patterns[part - len(literals)].search(self.buf, pos, horizon)
        return (match.start(), match.end(), part) if match else (horizon, -1, part)


HORIZON_BYTES = 4 << 20


def _horizon(buf: bytes | mmap.mmap, pos: int) -> int:
    """Where a part's search from pos stops: the end of the whole lines within HORIZON_BYTES."""
    return whole_lines_end(buf, pos, HORIZON_BYTES)
