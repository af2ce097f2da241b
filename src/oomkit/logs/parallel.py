"""Rank files scanned on every core. A worker process runs the key over one memory-mapped file and
returns where the lines to read are (start, end, line number: 24 bytes a line, whatever the line
holds); the parent parses those lines from its own mapping and merges the ranks in time order.
A file the key cannot scan in place (a container's JSON records, a .gz) is decoded in the worker,
which returns the records of its candidate lines: decoding, not the key, is most of such a file's
cost. Only a large log goes to workers: a pool costs more than it saves on a small one."""

from __future__ import annotations

import mmap
import multiprocessing
import os
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomkit.errors import InputError
from oomkit.logs.line import MAX_LINE_CHARS, Record, parse_lines

if TYPE_CHECKING:
    from oomkit.logs.reader import Gaps, Key, ReadStats

PARALLEL_MIN_BYTES = 32 << 20
# A decoding worker returns its file's candidate records whole; past this many (a log that is mostly key lines) it gives
# up and the parent streams the file itself, so memory stays bounded however the file reads.
DECODED_MAX_RECORDS = 200_000
# A .gz counts at the size it is likely to inflate to (server logs compress 5-10x), so rotated rank logs qualify.
GZIP_INFLATION = 6


@dataclass(frozen=True)
class Located:
    """What a worker found in one file: line spans as a flat array of (start, end, line number)."""

    name: str
    spans: array
    lines: int
    size: int
    gaps: Gaps | None


@dataclass(frozen=True)
class Decoded:
    """What a worker read from a file it had to decode: the candidate lines' records (None: more than
    DECODED_MAX_RECORDS, left to the parent), and what reading counted."""

    name: str
    records: list[Record] | None
    stats: ReadStats
    gaps: Gaps | None


def worth_parallel(names: list[str], jobs: int) -> bool:
    """Several files, more than one core, and enough bytes to repay starting workers."""
    if jobs < 2 or len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    return sum(_likely_bytes(name) for name in names) >= PARALLEL_MIN_BYTES


def _likely_bytes(name: str) -> int:
    from oomkit.logs.reader import GZIP_MAGIC

    size = os.path.getsize(name)
    try:
        with open(name, "rb") as fh:
            return size * GZIP_INFLATION if fh.read(2) == GZIP_MAGIC else size
    except OSError:
        return size  # reading it will say what is wrong, with the reader's message


def scan_all(plain: list[str], decoded: list[str], key: Key, gaps: Gaps | None, jobs: int) -> list[Located | Decoded]:
    """Each file scanned in a forked worker (fork: the compiled key and the rules are inherited,
    nothing is imported again): `plain` ones located, `decoded` ones read to records. The workers'
    gap counts are merged into `gaps`."""
    tasks = [(name, key, gaps, False) for name in plain] + [(name, key, gaps, True) for name in decoded]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=context) as pool:
        found = list(pool.map(_scan_safely, tasks))
    for item in found:
        if isinstance(item, str):
            raise InputError(item, "check the file and its permissions")
    scanned = [item for item in found if not isinstance(item, str) and not _given_up(item)]
    for item in scanned:
        if gaps is not None and item.gaps is not None:
            gaps.merge(item.gaps)
    return scanned


def _scan_safely(task: tuple[str, Key, Gaps | None, bool]) -> Located | Decoded | str:
    """Errors come back as text: an exception with extra arguments may not survive pickling."""
    name, key, gaps, decoding = task
    try:
        return decode_file(name, key, gaps) if decoding else locate(name, key, gaps)
    except InputError as err:
        return err.one_line()
    except OSError as err:
        return f"{name}: cannot read ({err.strerror})"


def decode_file(name: str, key: Key, gaps: Gaps | None) -> Decoded:
    from oomkit.logs.reader import ReadStats, _scan_one

    stats = ReadStats()
    records: list[Record] = []
    for record in _scan_one(name, key, stats, gaps):
        records.append(record)
        if len(records) > DECODED_MAX_RECORDS:
            return Decoded(name, None, stats, None)
    return Decoded(name, records, stats, gaps)


def _given_up(item: Located | Decoded) -> bool:
    return isinstance(item, Decoded) and item.records is None


def read_decoded(decoded: Decoded, stats: ReadStats) -> Iterator[Record]:
    """A worker's records of one file, with what its reading counted added to `stats`."""
    stats.files.extend(decoded.stats.files)
    stats.bytes += decoded.stats.bytes
    stats.lines += decoded.stats.lines
    stats.decode_errors += decoded.stats.decode_errors
    stats.truncated_lines += decoded.stats.truncated_lines
    stats.warnings.extend(decoded.stats.warnings)
    yield from decoded.records or ()


def locate(name: str, key: Key, gaps: Gaps | None) -> Located:
    from oomkit.logs.reader import SNIFF_BYTES, _count_newlines, _spans, sniff

    with open(name, "rb") as fh:
        sniff(name, fh.read(SNIFF_BYTES))
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    spans = array("q")
    lineno = cursor = 0
    try:
        for start, end in _spans(buf, key, gaps, release=True):
            lineno += _count_newlines(buf, cursor, start) + 1
            cursor = end + 1
            spans.extend((start, end, lineno))
        size = len(buf)
        tail = 1 if cursor < size and buf[size - 1 : size] != b"\n" else 0
        lines = lineno + _count_newlines(buf, cursor, size) + tail
    finally:
        buf.close()
    return Located(name, spans, lines, size, gaps)


def read_located(located: Located, stats: ReadStats) -> Iterator[Record]:
    """The located lines of one file as records, parsed here, in file order. Read with pread, not
    a mapping: a page fault maps its neighbours too, and over thousands of lines that adds up."""
    from oomkit.logs.reader import decode

    stats.files.append(located.name)
    stats.bytes += located.size
    stats.lines += located.lines
    if not located.spans:
        return
    fd = os.open(located.name, os.O_RDONLY)
    try:
        spans = located.spans
        for i in range(0, len(spans), 3):
            start, end, lineno = spans[i], spans[i + 1], spans[i + 2]
            if end - start > MAX_LINE_CHARS:
                stats.truncated_lines += 1
            raw = decode(os.pread(fd, min(end - start, MAX_LINE_CHARS), start), stats)
            yield from parse_lines(raw, located.name, lineno)
    finally:
        os.close(fd)
