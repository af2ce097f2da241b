"""Logs whose newlines a web page collapsed: several records on one line.

A Hugging Face Space's "Runtime error" panel and some forums show a log with its line breaks turned into spaces, so
a whole traceback and the vLLM lines around it arrive as one line. Read as one line, only its first frame and first
message count. Such a line is cut where a record of its own starts: vLLM's header (with the process prefix before
it), a traceback's first line, a Python frame, and within a frame the exception line after the frame's code. A line
is cut only when it is long and holds at least two such starts beyond a header's own frame; a normal line never is.
"""

from __future__ import annotations

import re
from itertools import pairwise

# Shorter lines are never flattened logs: every cut needs a header or a frame, and two of them take more room.
FLAT_MIN_CHARS = 240
# A bound on the work one line can cost (MAX_LINE_CHARS bounds the line itself).
MAX_PIECES = 2000
_HEADER = (
    r"(?:\([^\s()][^()]{0,80}? pid=\d{1,10}\)\s*)?(?<![\w-])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\[?[\w./-]+:\d+\]"
)
_FRAME = r'File "[^"]+", line \d+, in [\w<>.]+'
CUT = re.compile(rf"(?P<header>{_HEADER})|Traceback \(most recent call last\):|{_FRAME}")
FRAME = re.compile(_FRAME)
# The exception line after a frame's code ("raise ValueError(f'...') ValueError: No supported config format"): a
# class name ending as Python's exceptions do, then a colon. The code's own mention ("ValueError(") is not one.
EXCEPTION = re.compile(r"\s(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit)(?::\s|:$))")


def pieces(raw: str) -> list[str]:
    """The records a flattened line holds, in order; `[raw]` for every other line."""
    if len(raw) < FLAT_MIN_CHARS or not _two_starts_possible(raw):
        return [raw]
    cuts = _cuts(raw)
    if len(cuts) < 2:
        return [raw]
    bounds = [0, *cuts, len(raw)] if cuts[0] > 0 else [*cuts, len(raw)]
    out: list[str] = []
    for start, end in pairwise(bounds):
        out += _split_exception(raw[start:end].strip())
    return [piece for piece in out if piece][:MAX_PIECES]


def _two_starts_possible(raw: str) -> bool:
    """A necessary condition, counted in C: every header holds "]", every traceback start and frame its words. A
    long stats line (one "]") costs a microsecond here instead of a regex scan."""
    return raw.count("]") + raw.count('File "') + raw.count("Traceback (") >= 2


def _cuts(raw: str) -> list[int]:
    """Where records start. A frame or a traceback right after a header is that header's record (V0's engine prints
    each frame under its own header), not a record of its own."""
    cuts: list[int] = []
    header_end = -1
    for match in CUT.finditer(raw):
        if match.group("header"):
            cuts.append(match.start())
            header_end = match.end()
        elif not (header_end >= 0 and not raw[header_end : match.start()].strip()):
            cuts.append(match.start())
        if len(cuts) >= MAX_PIECES:
            break
    return cuts


def _split_exception(piece: str) -> list[str]:
    """A frame's piece ends with the exception line when the frame was the innermost: cut it off."""
    frame = FRAME.search(piece)
    if frame is None:
        return [piece]
    match = EXCEPTION.search(piece, frame.end())
    if match is None:
        return [piece]
    return [piece[: match.start()].rstrip(), piece[match.end() :]]
