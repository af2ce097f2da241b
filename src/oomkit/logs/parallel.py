"""Rank files scanned on every core. A worker process runs the key over one memory-mapped file and
returns where the lines to read are (start, end, line number: 24 bytes a line, whatever the line
holds); the parent parses those lines from its own mapping and merges the ranks in time order.
Only plain files of a large log go to workers: a pool costs more than it saves on a small one."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import re
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomkit.errors import InputError
from oomkit.logs.line import MAX_LINE_CHARS, Record, parse_lines

if TYPE_CHECKING:
    from oomkit.logs.reader import Gaps, ReadStats

PARALLEL_MIN_BYTES = 32 << 20


@dataclass(frozen=True)
class Located:
    """What a worker found in one file: line spans as a flat array of (start, end, line number)."""

    name: str
    spans: array
    lines: int
    size: int
    gaps: Gaps | None


def worth_parallel(names: list[str], jobs: int) -> bool:
    """Several plain files, more than one core, and enough bytes to repay starting workers."""
    if jobs < 2 or len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    return sum(os.path.getsize(name) for name in names) >= PARALLEL_MIN_BYTES


def locate_all(names: list[str], key: re.Pattern[bytes], gaps: Gaps | None, jobs: int) -> list[Located]:
    """Each file located in a forked worker (fork: the compiled key and the rules are inherited,
    nothing is imported again). The workers' gap counts are merged into `gaps`."""
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(names)), mp_context=context) as pool:
        found = list(pool.map(_locate_safely, [(name, key, gaps) for name in names]))
    for item in found:
        if isinstance(item, str):
            raise InputError(item, "check the file and its permissions")
    located = [item for item in found if isinstance(item, Located)]
    for item in located:
        if gaps is not None and item.gaps is not None:
            gaps.merge(item.gaps)
    return located


def _locate_safely(task: tuple[str, re.Pattern[bytes], Gaps | None]) -> Located | str:
    """Errors come back as text: an exception with extra arguments may not survive pickling."""
    name, key, gaps = task
    try:
        return locate(name, key, gaps)
    except InputError as err:
        return err.one_line()
    except OSError as err:
        return f"{name}: cannot read ({err.strerror})"


def locate(name: str, key: re.Pattern[bytes], gaps: Gaps | None) -> Located:
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
