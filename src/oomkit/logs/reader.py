"""Streaming, constant-memory reading of log sources: files, directories (one log per rank, node
or pod, merged in time order), .gz, and stdin ("-"); a log kept as a collector's JSON records (Docker's
json-file, journald's export: `envelope.py`) is read as the lines they hold. Bad input is an InputError
with one line."""

from __future__ import annotations

import gzip
import heapq
import io
import mmap
import os
import re
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, cast

from oomkit.errors import InputError
from oomkit.logs.document import DOCUMENT_MAX_BYTES, Document, looks_like_document, read_document
from oomkit.logs.envelope import Decoder, is_enveloped
from oomkit.logs.line import MAX_LINE_CHARS, Record, parse_lines

if TYPE_CHECKING:
    from oomkit.logs.parallel import Decoded, Located

BLOCK_BYTES = 4 << 20
# A block of JSON records is held decoded while its records are read, for each rank file at once: smaller blocks keep
# eight ranks' worth under the RSS goal.
ENVELOPED_BLOCK_BYTES = 1 << 20
# A JSON document read from a pipe cannot be read again: its bytes are kept while it is parsed, in case it is not a
# document after all, up to this size (a file is rewound instead, up to DOCUMENT_MAX_BYTES).
UNREWOUND_MAX_BYTES = 64 << 20
SNIFF_BYTES = 8192
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz", ""}
GZIP_MAGIC = b"\x1f\x8b"
Buffer = bytes | mmap.mmap


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
        self.enveloped = is_enveloped(head)
        self.document = not self.enveloped and looks_like_document(head)
        self.pushed = b""  # bytes read ahead (a document that was not one), read again as the first chunk

    def blocks(self, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
        """Whole-line blocks; a line longer than the cap is cut (and counted) without buffering it."""
        carry = b""
        skipping = False
        while True:
            chunk, self.pushed = (self.pushed, b"") if self.pushed else (self.read(block_bytes), b"")
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

    def read(self, block_bytes: int) -> bytes:
        """Up to `block_bytes` bytes; a read error is a warning, and what was read before it stands."""
        try:
            return self.fh.read(block_bytes)
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            self.stats.warnings.append(f"{self.name}: stopped reading early ({err}); analysed what was read")
            return b""

    def rewinds(self) -> bool:
        """The stream can go back to its start (a file, a .gz); a pipe cannot."""
        try:
            return bool(self.fh.seekable())
        except (OSError, ValueError):
            return False

    def rewind(self, kept: bytes) -> None:
        """Read again from the start: a pipe's bytes kept are read first; a file goes back to its start."""
        if not self.rewinds():
            self.pushed = kept
            return
        try:
            self.fh.seek(0)
        except (OSError, ValueError, EOFError, gzip.BadGzipFile) as err:
            self.stats.warnings.append(f"{self.name}: cannot read it again from the start ({err})")

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
    """A plain file the key can scan in place: not stdin, empty, gzip or JSON records (their text is escaped)."""
    try:
        if name == "-" or os.path.getsize(name) == 0:
            return False
        with open(name, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    return head[:2] != GZIP_MAGIC and not is_enveloped(head) and not looks_like_document(head)


def _count_newlines(buf: Buffer, start: int, end: int) -> int:
    """Newlines in buf[start:end], in bounded slices so a big gap never costs a big copy."""
    n = 0
    while start < end:
        stop = min(end, start + BLOCK_BYTES)
        n += buf[start:stop].count(b"\n")
        start = stop
    return n


RELEASE_BYTES = 1 << 20


def _release(buf: mmap.mmap, released: int, pos: int) -> int:
    """Drop already-scanned pages from this process's RSS (the page cache keeps them), so a
    1 GB log costs a bounded resident size."""
    if pos - released < RELEASE_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return released
    upto = pos - pos % mmap.PAGESIZE
    buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
    return upto


class Span(Protocol):
    def start(self) -> int: ...

    def end(self) -> int: ...


class Key(Protocol):
    """What picks the lines to read: a compiled bytes pattern (re, RE2) or anything searching the same way
    (`oomkit.triage.fast.LiteralKey`)."""

    def search(self, data: Buffer, pos: int = 0, endpos: int = ..., /) -> Span | None: ...


class Gaps(Protocol):
    """Lines between key matches that a caller still wants read. Called with whole lines of at most
    GAP_WINDOW bytes that the key did not match; returns the offsets (in `data`, ascending) of the
    line starts to read as records. It may count what it skips (triage counts stats lines)."""

    def __call__(self, data: bytes) -> list[int]: ...

    def merge(self, other: Gaps) -> None:
        """Fold in what a copy of this object counted in a worker process."""


SCAN_WINDOW = 1 << 20


def _spans(buf: Buffer, key: Key, gaps: Gaps | None, release: bool) -> Iterator[tuple[int, int]]:
    """(start, end) of each line to read, ascending: the lines the key matches and those `gaps`
    asks for between them. The regex runs over windows of whole lines in C (no rule spans two
    lines); Python sees only these lines. Scanned pages are released, so memory stays bounded."""
    size, pos, released = len(buf), 0, 0
    search = _searcher(key, buf)
    while pos < size:
        stop = _window_end(buf, pos)
        m = search(pos, stop)
        start = stop if m is None else max(buf.rfind(b"\n", pos, m.start()) + 1, pos)
        if gaps is not None and start > pos:
            data = bytes(buf[pos:start])
            for offset in gaps(data):
                end = data.find(b"\n", offset)
                yield pos + offset, pos + (len(data) if end < 0 else end)
        if m is None:
            pos = stop
        else:
            end = buf.find(b"\n", m.end())
            end = size if end < 0 else end
            yield start, end
            pos = end + 1
        if release:
            released = _release(buf, released, pos)  # type: ignore[arg-type]


def _searcher(key: Key, buf: Buffer) -> Callable[[int, int], Span | None]:
    """The key's search over one buffer. A key that keeps state per buffer (`oomkit.triage.fast.LiteralKey`, the
    fallback without RE2) gives a cursor of its own, so rank streams read in turn do not share one."""
    cursor = getattr(key, "cursor", None)
    if cursor is not None:
        return cast(Callable[[int, int], Span | None], cursor(buf).search)
    return lambda pos, stop: key.search(buf, pos, stop)


def _window_end(buf: Buffer, pos: int) -> int:
    """The end of the whole lines within SCAN_WINDOW bytes of pos (a longer line: that line)."""
    return whole_lines_end(buf, pos, SCAN_WINDOW)


def whole_lines_end(buf: Buffer, pos: int, limit: int) -> int:
    """The end of the whole lines within `limit` bytes of pos (a longer line: that line), or of the buffer."""
    if len(buf) - pos <= limit:
        return len(buf)
    cut = buf.rfind(b"\n", pos, pos + limit) + 1
    if cut > pos:
        return cut
    newline = buf.find(b"\n", pos + limit)
    return len(buf) if newline < 0 else newline + 1


def _numbered(
    buf: Buffer, spans: Iterable[tuple[int, int]], name: str, stats: ReadStats, first_line: int = 0
) -> Iterator[Record]:
    """Records of the spans, numbered by counting newlines in C between them. Adds the buffer's
    line count to `stats` once the spans are exhausted."""
    lineno, cursor, size = first_line, 0, len(buf)
    for start, end in spans:
        lineno += _count_newlines(buf, cursor, start) + 1
        cursor = end + 1
        if end - start > MAX_LINE_CHARS:
            stats.truncated_lines += 1
        yield from parse_lines(decode(bytes(buf[start : min(end, start + MAX_LINE_CHARS)]), stats), name, lineno)
    tail = 1 if cursor < size and buf[size - 1 : size] != b"\n" else 0
    stats.lines += lineno - first_line + _count_newlines(buf, cursor, size) + tail


def _scan_mapped(name: str, key: Key, stats: ReadStats, gaps: Gaps | None) -> Iterator[Record]:
    """A plain file, memory-mapped: the key runs over the whole file with no copies."""
    with open(name, "rb") as fh:
        sniff(name, fh.read(SNIFF_BYTES))
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    stats.files.append(name)
    stats.bytes += len(buf)
    try:
        yield from _numbered(buf, _spans(buf, key, gaps, release=True), name, stats)
    finally:
        buf.close()


def _scan_one(name: str, key: Key | None, stats: ReadStats, gaps: Gaps | None = None) -> Iterator[Record]:
    """Records of one source. With `key`, only lines where key matches (and those `gaps` asks for)
    are parsed: the regex runs over the file (memory-mapped) or whole blocks in C, which keeps a
    1 GB log near grep speed."""
    if key is not None and _mappable(name):
        yield from _scan_mapped(name, key, stats, gaps)
        return
    src = _Source(name, stats)
    stats.files.append(name)
    document = _read_document(src, stats) if src.document else None
    if document is not None:
        src.close()
        yield from _decoded(document.text, document.where, name, key, stats, gaps)
        return
    if src.enveloped:
        yield from _scan_enveloped(src, key, stats, gaps)
        return
    lineno = 0
    try:
        for block in src.blocks():
            if key is None:
                for raw in block.split(b"\n")[:-1]:  # not splitlines(): "\r" is a tqdm refresh
                    lineno += 1
                    yield from parse_lines(decode(raw, stats), name, lineno)
                continue
            before = stats.lines
            yield from _numbered(block, _spans(block, key, gaps, release=False), name, stats, lineno)
            lineno += stats.lines - before
        if key is None:
            stats.lines += lineno
    finally:
        src.close()


def _scan_enveloped(src: _Source, key: Key | None, stats: ReadStats, gaps: Gaps | None) -> Iterator[Record]:
    """A file of JSON records: each block decoded to the lines it holds, which are read as a plain log's (the key and
    the gaps run over the decoded text), each record on the line of the file it came from."""
    decoder = Decoder()
    lineno = 0
    try:
        for block in src.blocks(ENVELOPED_BLOCK_BYTES):
            yield from _decoded(
                *decoder.raw_block(block, lineno, lambda raw: decode(raw, stats)), src.name, key, stats, gaps
            )
            lineno += block.count(b"\n")
        yield from _decoded(*decoder.flush(), src.name, key, stats, gaps)
        stats.lines += lineno
    finally:
        src.close()


def _read_document(src: _Source, stats: ReadStats) -> Document | None:
    """A JSON document's entries as text lines in time order (`document.py`), parsed as the file is read; None, with
    the file left for the text reader (rewound, or a pipe's bytes kept), when it is not one or is too large."""
    rewinds = src.rewinds()
    limit = DOCUMENT_MAX_BYTES if rewinds else UNREWOUND_MAX_BYTES
    kept: list[bytes] = []
    read_bytes = 0

    def chunks() -> Iterator[bytes]:
        nonlocal read_bytes
        while chunk := src.read(BLOCK_BYTES):
            read_bytes += len(chunk)
            if not rewinds:
                kept.append(chunk)
            if read_bytes > limit:
                return  # the document looks cut short here: it is left to the text reader
            yield chunk

    decoded = read_document(chunks())
    if decoded is None:
        if read_bytes > limit:
            stats.warnings.append(
                f"{src.name}: a JSON document over {limit >> 20} MiB is read as text lines, not as its "
                "entries in time order; export one entry a line, oldest first, which oomkit streams "
                "(`gcloud logging read ... --order=asc --format=json | jq -c '.[]'`, `... | jq -c '.events[]'`)"
            )
        src.rewind(b"".join(kept))
        return None
    stats.bytes += read_bytes
    stats.lines += len(decoded.where)
    stats.warnings.append(
        f"{src.name}: read as a JSON export of {decoded.entries} entries, oldest first; its line numbers count the "
        "log lines the entries hold, not the file's lines"
    )
    return decoded


def _decoded(
    text: bytes, where: array, name: str, key: Key | None, stats: ReadStats, gaps: Gaps | None
) -> Iterator[Record]:
    """Records of decoded text; `where[i]`: the file's line that the text's line i + 1 came from."""
    if key is None:
        for index, raw in enumerate(text.split(b"\n")[:-1]):
            yield from parse_lines(decode(raw, stats), name, where[index])
        return
    scratch = ReadStats()  # counts the decoded lines, not the file's
    for rec in _numbered(text, _spans(text, key, gaps, release=False), name, scratch):
        yield replace(rec, line=where[rec.line - 1])
    stats.truncated_lines += scratch.truncated_lines


def iter_records(
    paths: Iterable[str],
    key: Key | None = None,
    stats: ReadStats | None = None,
    gaps: Gaps | None = None,
    jobs: int = 1,
) -> Iterator[Record]:
    """All records (or, with `key`, the candidate lines) of the inputs; several files are merged in
    time order so one rank's error lands between the other ranks' lines around it. Lines without
    a time (tracebacks, tqdm bars) sort with the last timed line of their file. With `key` and
    `jobs` > 1, plain files of a large log are scanned by that many worker processes."""
    stats = stats if stats is not None else ReadStats()
    names = expand_inputs(paths)
    if len(names) == 1:
        yield from _scan_one(names[0], key, stats, gaps)
    else:
        for _, _, _, rec in heapq.merge(*_streams(names, key, stats, gaps, jobs)):
            yield rec
    if stats.lines == 0 and stats.bytes == 0:
        raise InputError(
            f"{', '.join(names)}: empty, no log lines to analyse", "check that the server's output was captured"
        )


def _streams(
    names: list[str], key: Key | None, stats: ReadStats, gaps: Gaps | None, jobs: int
) -> list[Iterator[tuple[str, int, int, Record]]]:
    from oomkit.logs import parallel

    files = [name for name in names if name != "-"]
    if key is None or not parallel.worth_parallel(files, jobs):
        return [_timed(_scan_one(name, key, stats, gaps), i) for i, name in enumerate(names)]
    plain = [name for name in files if _mappable(name)]
    scanned = {
        item.name: item for item in parallel.scan_all(plain, [n for n in files if n not in plain], key, gaps, jobs)
    }
    return [
        _timed(_read_scanned(scanned[name], stats) if name in scanned else _scan_one(name, key, stats, gaps), i)
        for i, name in enumerate(names)
    ]


def _read_scanned(item: Located | Decoded, stats: ReadStats) -> Iterator[Record]:
    from oomkit.logs import parallel

    if isinstance(item, parallel.Decoded):
        return parallel.read_decoded(item, stats)
    return parallel.read_located(item, stats)


def _timed(records: Iterator[Record], index: int) -> Iterator[tuple[str, int, int, Record]]:
    last = ""
    for rec in records:
        last = rec.time or last
        yield (last, index, rec.line, rec)


def read_text_lines(data: str, name: str = "-") -> Iterator[Record]:
    """Records from a string (tests, live follow of an in-memory buffer)."""
    for i, raw in enumerate(io.StringIO(data), start=1):
        yield from parse_lines(raw, name, i)


def file_size(name: str) -> int | None:
    try:
        return os.path.getsize(name)
    except OSError:
        return None
