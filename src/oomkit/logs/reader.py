"""Streaming, constant-memory reading of log sources: files, directories (one log per rank, node
or pod, merged in time order), .gz, and stdin ("-"). Bad input is an InputError with one line."""

from __future__ import annotations

import gzip
import heapq
import io
import mmap
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from oomkit.errors import InputError
from oomkit.logs.line import MAX_LINE_CHARS, Record, parse_line

BLOCK_BYTES = 4 << 20
SNIFF_BYTES = 8192
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz", ""}
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ReadStats:
    """What reading found that the user should know (kept, not raised)."""

    lines: int = 0
    bytes: int = 0
    decode_errors: int = 0
    truncated_lines: int = 0
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def expand_inputs(paths: Iterable[str]) -> list[str]:
    """Paths as given, with directories expanded to the log files inside them."""
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)
            continue
        path = Path(p)
        if not path.exists():
            raise InputError(f"{p}: no such file or directory", "give the path of a vLLM log file or folder")
        if path.is_dir():
            found = sorted(str(f) for f in path.rglob("*") if _is_log_file(f))
            if not found:
                raise InputError(
                    f"{p}: folder has no log files (.log, .txt, .out, .err, .gz)",
                    "point at the folder that holds the server logs",
                )
            out.extend(found)
        else:
            out.append(str(path))
    if not out:
        raise InputError("no input given", "pass a log file, a folder of logs, or - for stdin")
    return out


def _is_log_file(f: Path) -> bool:
    if not f.is_file() or any(part.startswith(".") for part in f.parts[-1:]):
        return False
    suffix = f.suffix.lower()
    return suffix in LOG_SUFFIXES or re.fullmatch(r"\.\d+", suffix) is not None  # rotated: x.log.1


def open_binary(name: str) -> BinaryIO:
    if name == "-":
        return sys.stdin.buffer
    try:
        fh: BinaryIO = open(name, "rb")
    except IsADirectoryError:
        raise InputError(f"{name}: is a folder", "pass the folder itself, oomkit reads the logs inside") from None
    except OSError as err:
        raise InputError(f"{name}: cannot read ({err.strerror})", "check the path and its permissions") from None
    head = fh.read(2)
    fh.seek(0)
    if head == GZIP_MAGIC:
        return gzip.open(fh, "rb")  # type: ignore[return-value]
    return fh


def sniff(name: str, head: bytes) -> None:
    """Refuse what is clearly not a text log; a few odd bytes in a real log are fine."""
    if not head:
        return
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{name}: file is UTF-16 encoded", "convert it with `iconv -f UTF-16 -t UTF-8`")
    nul = head.count(b"\x00")
    controls = sum(1 for b in head if b < 9 or 13 < b < 27 or 27 < b < 32)
    if nul > len(head) // 100 or controls > len(head) // 10:
        raise InputError(
            f"{name}: looks like binary data, not a text log", "pass the server's stdout/stderr log (a .gz is fine)"
        )


class _Source:
    """Block-buffered line reader over one binary stream with a hard cap on line length."""

    def __init__(self, name: str, stats: ReadStats):
        self.name = name
        self.stats = stats
        self.fh = open_binary(name)
        try:
            head = self.fh.peek(SNIFF_BYTES)[:SNIFF_BYTES] if hasattr(self.fh, "peek") else b""
        except (OSError, EOFError) as err:
            raise InputError(f"{name}: cannot read ({err})", "the file may be a truncated .gz; try `zcat -f`") from None
        sniff(name, head)

    def blocks(self) -> Iterator[bytes]:
        """Whole-line blocks; a line longer than the cap is cut (and counted) without buffering it."""
        carry = b""
        skipping = False
        while True:
            try:
                chunk = self.fh.read(BLOCK_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile) as err:
                self.stats.warnings.append(f"{self.name}: stopped reading early ({err}); analysed what was read")
                chunk = b""
            if not chunk:
                break
            self.stats.bytes += len(chunk)
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk, skipping = chunk[nl + 1 :], False
            data = carry + chunk
            nl = data.rfind(b"\n")
            if nl < 0:
                if len(data) > MAX_LINE_CHARS:
                    self.stats.truncated_lines += 1
                    yield data[:MAX_LINE_CHARS] + b"\n"
                    carry, skipping = b"", True
                else:
                    carry = data
                continue
            carry = data[nl + 1 :]
            if len(carry) > MAX_LINE_CHARS:
                self.stats.truncated_lines += 1
                yield data[: nl + 1] + carry[:MAX_LINE_CHARS] + b"\n"
                carry, skipping = b"", True
                continue
            yield data[: nl + 1]
        if carry:
            yield carry + b"\n"  # a file cut mid-line: keep the partial last line

    def close(self) -> None:
        if self.fh is not sys.stdin.buffer:
            self.fh.close()


def decode(raw: bytes, stats: ReadStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.decode_errors += 1
        return raw.decode("utf-8", errors="replace")


def _mappable(name: str) -> bool:
    try:
        if name == "-" or os.path.getsize(name) == 0:
            return False
        with open(name, "rb") as fh:
            return fh.read(2) != GZIP_MAGIC
    except OSError:
        return False


def _count_newlines(buf: mmap.mmap, start: int, end: int) -> int:
    """Newlines in buf[start:end], in bounded slices so a big gap never costs a big copy."""
    n = 0
    while start < end:
        stop = min(end, start + BLOCK_BYTES)
        n += buf[start:stop].count(b"\n")
        start = stop
    return n


RELEASE_BYTES = 16 << 20


def _release(buf: mmap.mmap, released: int, pos: int) -> int:
    """Drop already-scanned pages from this process's RSS (the page cache keeps them), so a
    1 GB log costs a bounded resident size."""
    if pos - released < RELEASE_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return released
    upto = pos - pos % mmap.PAGESIZE
    buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
    return upto


def _scan_mapped(name: str, key: re.Pattern[bytes], stats: ReadStats) -> Iterator[Record]:
    """A plain file, memory-mapped: the key runs over the whole file with no copies."""
    with open(name, "rb") as fh:
        sniff(name, fh.read(SNIFF_BYTES))
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    stats.files.append(name)
    size = len(buf)
    stats.bytes += size
    pos = lineno = released = 0
    try:
        while pos < size:
            released = _release(buf, released, pos)
            m = key.search(buf, pos)
            if m is None:
                break
            start = buf.rfind(b"\n", pos, m.start()) + 1
            start = max(start, pos)
            end = buf.find(b"\n", m.end())
            end = size if end < 0 else end
            lineno += _count_newlines(buf, pos, start) + 1
            if end - start > MAX_LINE_CHARS:
                stats.truncated_lines += 1
            pos = end + 1
            yield parse_line(decode(buf[start : min(end, start + MAX_LINE_CHARS)], stats), name, lineno)
        lineno += _count_newlines(buf, pos, size) + (
            0 if size == 0 or buf[size - 1 : size] == b"\n" or pos >= size else 1
        )
        stats.lines += lineno
    finally:
        buf.close()


def _scan_one(name: str, key: re.Pattern[bytes] | None, stats: ReadStats) -> Iterator[Record]:
    """Records of one source. With `key`, only lines where key matches are parsed: the regex runs
    over the file (memory-mapped) or whole blocks in C, which keeps a 1 GB log near grep speed."""
    if key is not None and _mappable(name):
        yield from _scan_mapped(name, key, stats)
        return
    src = _Source(name, stats)
    stats.files.append(name)
    lineno = 0
    try:
        for block in src.blocks():
            if key is None:
                for raw in block.split(b"\n")[:-1]:  # not splitlines(): "\r" is a tqdm refresh
                    lineno += 1
                    rec = parse_line(decode(raw, stats), name, lineno)
                    yield rec
                continue
            pos = 0
            while True:  # search from the end of the last hit line: one call per candidate line
                m = key.search(block, pos)
                if m is None:
                    break
                start = block.rfind(b"\n", 0, m.start()) + 1
                end = block.find(b"\n", m.end())
                end = len(block) if end < 0 else end
                lineno += block.count(b"\n", pos, start) + 1
                pos = end + 1
                yield parse_line(decode(block[start:end], stats), name, lineno)
            lineno += block.count(b"\n", pos)
        stats.lines += lineno
    finally:
        src.close()


def iter_records(
    paths: Iterable[str], key: re.Pattern[bytes] | None = None, stats: ReadStats | None = None
) -> Iterator[Record]:
    """All records (or, with `key`, the candidate lines) of the inputs; several files are merged in
    time order so one rank's error lands between the other ranks' lines around it. Lines without
    a time (tracebacks, tqdm bars) sort with the last timed line of their file."""
    stats = stats if stats is not None else ReadStats()
    names = expand_inputs(paths)
    if len(names) == 1:
        yield from _scan_one(names[0], key, stats)
    else:
        streams = [_timed(_scan_one(n, key, stats), i) for i, n in enumerate(names)]
        for _, _, _, rec in heapq.merge(*streams):
            yield rec
    if stats.lines == 0 and stats.bytes == 0:
        raise InputError(
            f"{', '.join(names)}: empty, no log lines to analyse", "check that the server's output was captured"
        )


def _timed(records: Iterator[Record], index: int) -> Iterator[tuple[str, int, int, Record]]:
    last = ""
    for rec in records:
        last = rec.time or last
        yield (last, index, rec.line, rec)


def read_text_lines(data: str, name: str = "-") -> Iterator[Record]:
    """Records from a string (tests, live follow of an in-memory buffer)."""
    for i, raw in enumerate(io.StringIO(data), start=1):
        yield parse_line(raw, name, i)


def file_size(name: str) -> int | None:
    try:
        return os.path.getsize(name)
    except OSError:
        return None
