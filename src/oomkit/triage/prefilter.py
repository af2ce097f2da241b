"""Which lines of a log the engine reads. Two kinds:

- **Key lines**: a line some rule can match. The key is derived from the rules themselves (each
  rule's required literals, `literals.py`), so it lets through no line that no rule can use;
  a hand list of generic words ("tokens", "ngine") let every stats and request line through.
- **Periodic lines**: stats lines and request lines, which a long-running server prints by the
  million. Between two key lines only the first request line (it places the serving marker) and
  the first and last stats lines (the serving marker; the last sample before a failure) are read;
  the others are counted, with the peaks the summary reports, by C-level scans of the whole gap.
  A stats line that can change the verdict (KV cache nearly full with requests waiting, or
  preemptions) is a key line, read like any other.
"""

from __future__ import annotations

import re

from oomkit.logs.envelope import TEXT_KEYS, TRACE_KEYS
from oomkit.logs.line import parse_line, parse_lines
from oomkit.logs.reader import Gaps
from oomkit.triage import facts, failures, figures, frames, markers
from oomkit.triage.literals import Need, ere_pattern, key_pattern, required_literals
from oomkit.triage.stats import STATS_HEAD

SERVE_MARKER = next(m for m in markers.MARKERS if m.id == "R-SERVE")
# Stats lines worth reading one by one: what StatsAggregate counts as full (KV cache >= FULL_KV_PCT
# with requests waiting) or preempting. RE2 has no look-behind, so V0's "CPU KV cache usage" can
# match too: a few extra key lines, never a missed one (tests/test_triage_prefilter.py checks the
# threshold against FULL_KV_PCT).
PRESSURE = r"(?:Waiting|Pending): [1-9][^\n]*KV cache usage: (?:9[5-9]|100)|Preemptions: [1-9]"


def rule_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Every pattern the engine applies to a line, but the periodic ones, with a name for messages."""
    named = [(m.id, m.pattern) for m in markers.MARKERS if m is not SERVE_MARKER]
    named += [(f.id, f.pattern) for f in failures.FAILURES]
    named += [
        ("SHUTDOWN", markers.SHUTDOWN),
        ("SLOW_STEP", markers.SLOW_STEP),
        ("FRAME", frames.FRAME),
        ("FRAME_HEAD", frames.FRAME_HEAD),
        ("FRAME_TAIL", frames.FRAME_TAIL),
        ("FAULT_HEADER", frames.FAULT_HEADER),
        ("FAULT_FRAME", frames.FAULT_FRAME),
        ("RPC_CALL", frames.RPC_CALL),
        ("REPLY_WAIT_CALL", frames.REPLY_WAIT_CALL),
        ("RAISE_LINE", frames.RAISE_LINE),
        ("STEP_CALL", frames.STEP_CALL),
        ("BATCH", frames.BATCH),
        ("DUMP_SOURCE", frames.DUMP_SOURCE),
        ("TRACEBACK", re.compile(re.escape("Traceback (most recent call last)"))),
        ("SERVING_MESSAGE", frames.SERVING_MESSAGE),
    ]
    named += [(f"FIGURE {rule.source}", rule.pattern) for rule in figures.FIGURES]
    named += [
        ("OOM_LINE", figures.OOM_LINE),
        ("OOM_ALLOCATED", figures.OOM_ALLOCATED),
        ("OOM_IN_USE", figures.OOM_IN_USE),
        ("OOM_PRIVATE", figures.OOM_PRIVATE),
        ("OOM_RESERVED", figures.OOM_RESERVED),
        ("OOM_OLD_RESERVED", figures.OOM_OLD_RESERVED),
        ("CPU_ALLOC", figures.CPU_ALLOC),
        ("ENGINE_CFG", facts.ENGINE_CFG),
        ("ARGS_DICT", facts.ARGS_DICT),
        ("ARGS_NS", facts.ARGS_NS),
    ]
    named += [("VERSION", p) for p in facts.VERSION] + [("MODEL", p) for p in facts.MODEL]
    return named


def _needs() -> list[Need]:
    needs = []
    for name, pattern in rule_patterns():
        need = required_literals(pattern)
        if need is None:  # tests/test_triage_prefilter.py keeps this from happening silently
            raise ValueError(f"rule {name} has no literal the prefilter can key on: {pattern.pattern}")
        needs.append(need)
    return needs


# A collector's JSON record on a line of a log that is not all such records (`oomkit.logs.envelope`; a file that is
# all records is decoded before the key runs): its text is escaped (`File \"...\"`), so the line is read whatever it
# holds, as reading every line would unwrap it.
_FIELDS = "|".join(TEXT_KEYS + TRACE_KEYS)
ENVELOPE_FIELD = f'"(?:{_FIELDS})" ?: ?"'
# The same for grep -E (benchmarks/triage_speed.py times grep with it).
PRESSURE_ERE = "(Waiting|Pending): [1-9].*KV cache usage: (9[5-9]|100)|Preemptions: [1-9]"
ENVELOPE_FIELD_ERE = f'"({_FIELDS})" ?: ?"'
NEEDS = _needs()
KEY_PATTERN = key_pattern(NEEDS) + "|" + PRESSURE + "|" + ENVELOPE_FIELD
KEY_BYTES = re.compile(KEY_PATTERN.encode())  # the live follow's key, and what the fallback must equal
KEY_ERE = ere_pattern(NEEDS) + "|" + PRESSURE_ERE + "|" + ENVELOPE_FIELD_ERE
SERVE_LITERALS = tuple(sorted(lit.text.encode() for lit in required_literals(SERVE_MARKER.pattern) or ()))
STATS_TAG = b"Avg prompt throughput: "
# A line a live follow must read: a key line or a periodic one (no gap scan there).
LIVE_KEY = re.compile(KEY_PATTERN + "|" + "|".join(re.escape(lit.decode()) for lit in SERVE_LITERALS))

# The peaks the summary reports, read from skipped stats lines in bulk. Each pattern starts with a
# literal: Python's re then finds candidates with a fast substring search (an alternation or a
# look-behind first would make it try every byte). V0 prints GPU and CPU (swap) usage: the GPU one
# counts; the CPU backend prints only "CPU KV cache usage", its device.
BULK_PEAKS: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    ("running", re.compile(rb"Running: (\d+)")),
    ("waiting", re.compile(rb"Waiting: (\d+)")),
    ("waiting", re.compile(rb"Pending: (\d+)")),
)
STATS_REST = re.compile(re.escape(STATS_TAG) + rb"[^\n]*")
KV_PEAK = re.compile(rb"KV cache usage: ([\d.]+)%")
GPU_KV_PEAK = re.compile(rb"GPU KV cache usage: ([\d.]+)%")


MAX_LINE_TRIES = 64  # lines a gap scan tries before it settles (the first request line, the first and last stats lines)


def _stats_line(data: bytes, at: int, *, forward: bool) -> tuple[int, list[int]]:
    """The start of the first (or last) line from the tag found at `at` whose message is a stats line,
    and the starts of the lines with the tag passed on the way (up to MAX_LINE_TRIES; then the last
    one tried, as before)."""
    passed: list[int] = []
    start = data.rfind(b"\n", 0, at) + 1
    for _ in range(MAX_LINE_TRIES):
        stop = data.find(b"\n", start)
        stop = stop if stop >= 0 else len(data)
        if STATS_HEAD.search(parse_line(data[start:stop].decode("utf-8", "replace")).msg):
            return start, passed
        found = data.find(STATS_TAG, stop) if forward else data.rfind(STATS_TAG, 0, max(start - 1, 0))
        if found < 0:
            break
        passed.append(start)
        start = data.rfind(b"\n", 0, found) + 1
    return start, passed


def _first_serve_line(data: bytes, end: int) -> int | None:
    """The start of the first request line before `end` that places the serving marker, as reading every line
    would find it: a line whose prefix did not parse (an excerpt's first line cut mid-word) carries the literal
    and places nothing, so the next one is tried (up to MAX_LINE_TRIES; then the first, as before)."""
    first = None
    pos = 0
    for _ in range(MAX_LINE_TRIES):
        found = [at for lit in SERVE_LITERALS if (at := data.find(lit, pos, end)) >= 0]
        if not found:
            break
        start = data.rfind(b"\n", 0, min(found)) + 1
        stop = data.find(b"\n", start, end)
        stop = stop if stop >= 0 else end
        if SERVE_MARKER.pattern.search(parse_line(data[start:stop].decode("utf-8", "replace")).msg):
            return start
        first = start if first is None else first
        pos = stop + 1
    return first


def _more_records(data: bytes, read: set[int]) -> int:
    """The stats records beyond one per line on lines that hold several (a page collapsed the log's newlines), as
    reading every line splits them (`parse_lines`); lines the reader reads anyway (`read`: their starts) aside."""
    more = 0
    for match in STATS_REST.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        if start in read or data.find(STATS_TAG, match.start() + 1, match.end()) < 0:
            continue
        records = parse_lines(data[start : match.end()].decode("utf-8", "replace"))
        more += sum(bool(STATS_HEAD.search(record.msg)) for record in records) - 1
    return more


class PeriodicLines:
    """The gap hook of the reader (`oomkit.logs.reader.Gaps`): picks the periodic lines to read
    and counts the others. Order does not matter for what it keeps (a count and maxima)."""

    def __init__(self) -> None:
        self.skipped_stats = 0
        self.peaks: dict[str, float] = {}

    def __call__(self, data: bytes) -> list[int]:
        starts = set()
        first = data.find(STATS_TAG)
        # A request line places the serving marker only when it comes before the first stats line.
        serve = _first_serve_line(data, first if first >= 0 else len(data))
        if serve is not None:
            starts.add(serve)
        if first >= 0:
            # The first and last lines that parse as stats lines, as reading every line finds them; a line holding
            # the tag mid-way (a progress bar with a stats line run on after it) is read as it is, before them.
            head, passed = _stats_line(data, first, forward=True)
            tail, passed_back = _stats_line(data, data.rfind(STATS_TAG), forward=False)
            starts.update(passed + passed_back + [head, tail])
            stats_lines = STATS_REST.findall(data)  # the stats lines' text only: the peaks come from these
            for start in set(passed + passed_back) - {head, tail}:  # read as they are: no stats line's peaks
                if found := STATS_REST.search(data, start):
                    stats_lines.remove(found.group(0))
            skipped = len(stats_lines) - len({head, tail})
            if data.count(STATS_TAG) > len(stats_lines):  # a line holding several stats records (a collapsed log)
                skipped += _more_records(data, {head, tail, *passed, *passed_back})
            if skipped > 0:
                self.skipped_stats += skipped
                self._peaks(b"\n".join(stats_lines))
        return sorted(starts)

    def _peaks(self, stats_text: bytes) -> None:
        found = [(name, pattern.findall(stats_text)) for name, pattern in BULK_PEAKS]
        kv = GPU_KV_PEAK if b"GPU KV cache usage" in stats_text else KV_PEAK
        found.append(("kv_usage_pct", kv.findall(stats_text)))
        for name, values in found:
            if values:
                self._raise(name, max(map(float, values)))

    def _raise(self, name: str, peak: float) -> None:
        self.peaks[name] = max(peak, self.peaks.get(name, peak))

    def merge(self, other: Gaps) -> None:
        if not isinstance(other, PeriodicLines):
            raise TypeError(f"cannot merge {type(other).__name__} into PeriodicLines")
        self.skipped_stats += other.skipped_stats
        for name, peak in other.peaks.items():
            self._raise(name, peak)
