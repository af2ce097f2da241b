"""A log inside a collector's records, one JSON object a line: Docker's json-file driver (`{"log": "...\\n",
"stream": "stderr", "time": ...}`, what /var/lib/docker/containers/*/*-json.log holds), Fluent Bit's and Fluentd's
records (`log`), `journalctl -o json` (`MESSAGE`), Cloud Logging exports (`textPayload`, `jsonPayload.message`),
Elasticsearch hits (`_source.message`), Loki's `logcli --output jsonl` (`line`), and Python JSON formatters (`message`,
with the traceback in `exc_info`: vLLM's own `--logging-config.formatter json` from 0.32, NVIDIA NIM's containers).
The text of each record is the log's own lines; the reader reads those, on the record's line number. JSON escapes quotes, newlines and (Go) `<`/`>`, so the key that
picks candidate lines runs over the decoded text, not the file's bytes.

CRI's text format (containerd, CRI-O: /var/log/pods/*/*.log, "<time> stderr F <text>") is not JSON: its stamp is
peeled per line like any wrapper (`line.py`)."""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

TEXT_KEYS = ("log", "MESSAGE", "textPayload", "message", "msg", "line")
NESTED_KEYS = ("jsonPayload", "_source")  # Cloud Logging's structured payload, an Elasticsearch hit
# A formatter's traceback and stack, printed after the message as `logging` would print them.
TRACE_KEYS = ("exc_info", "exc_text", "stack_info", "stack_trace", "traceback")
TRACE_SET = frozenset(TRACE_KEYS)
EMPTY = frozenset({"", "None", "null"})
SNIFF_LINES = 20
ENVELOPE_SHARE = 2 / 3  # of the first lines: a log with a stray JSON line (a request body) is not enveloped


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """One record's text lines. `complete` is False for a record Docker cut from a line longer than 16 KiB (no
    trailing newline): the next record of its `stream` goes on with that line."""

    lines: tuple[str, ...]
    stream: str | None = None
    complete: bool = True


def unwrap(raw: str) -> Unwrapped | None:
    """The text a JSON log record holds, or None when the line is not such a record."""
    stripped = raw.strip()
    if len(stripped) < 2 or stripped[0] != "{":
        return None
    try:
        record = json.loads(stripped)
    except RecursionError:
        return None  # nested deeper than the decoder recurses: no collector writes that, the line stays a line
    except ValueError:
        return _cut_record(stripped)
    return _of(record)


def record_text(record: object) -> Unwrapped | None:
    """The text a parsed JSON record holds (a collector's record, an export's entry), or None when it holds none."""
    return _of(record)


def _of(record: object) -> Unwrapped | None:
    if type(record) is not dict:
        return None
    text = record.get("log")
    # Docker's and Fluent Bit's records, most lines of most enveloped files: the text is the "log" field
    if type(text) is str and TRACE_SET.isdisjoint(record):
        stream = record.get("stream")
        if type(stream) is not str:
            return Unwrapped(tuple(text.removesuffix("\n").split("\n")) if text not in EMPTY else ())
        complete = text.endswith("\n")
        return Unwrapped(tuple(text[:-1].split("\n") if complete else text.split("\n")), stream, complete)
    holder, key = _text_holder(record)
    if holder is None:
        return None
    text = holder.get(key, "")
    traces = [value for name in TRACE_KEYS if isinstance(value := holder.get(name), str) and value not in EMPTY]
    lines = text.removesuffix("\n").split("\n") if text not in EMPTY else []
    for trace in traces:
        lines += trace.removesuffix("\n").split("\n")
    if lines and key in ("message", "msg", ""):
        lines = _as_logging_prints(holder, lines)
    return Unwrapped(tuple(lines))


LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING", "ERROR": "ERROR"}
LEVELS |= {"CRITICAL": "CRITICAL", "FATAL": "CRITICAL"}
LOGGER_NAME = re.compile(r"[A-Za-z_][\w.]*")
VLLM_HEADER = re.compile(r"^(?:\(.{1,120}? pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d ")


def _as_logging_prints(holder: dict, lines: list[str]) -> list[str]:
    """A Python logging record's lines as vLLM's text format prints them, so that its level, logger and process are
    read (vLLM >= 0.32's `--logging-config.formatter json` writes `levelname`, `name`, `processName` and `process`
    beside the message): "(EngineCore_DP0 pid=7) ERROR:vllm.v1.engine.core:message", the process prefix on every
    line of the message and its traceback. A message that holds vLLM's own header is left as it is."""
    level = holder.get("levelname", holder.get("level"))
    name = holder.get("name", holder.get("logger"))
    if not (isinstance(level, str) and isinstance(name, str) and LOGGER_NAME.fullmatch(name)):
        return lines
    level = LEVELS.get(level.upper())
    if level is None or VLLM_HEADER.match(lines[0]):
        return lines
    process, pid = holder.get("processName"), holder.get("process")
    prefix = f"({process} pid={pid}) " if isinstance(process, str) and isinstance(pid, int) else ""
    return [f"{prefix}{level}:{name}:{lines[0]}", *(prefix + line for line in lines[1:])]


def _parsed(lines: list[str]) -> list[Unwrapped | None]:
    """Each line's record; a block of whole records is parsed by one call into the JSON decoder's C code."""
    if all(line[:1] == "{" for line in lines):
        try:
            records = json.loads("[" + ",".join(lines) + "]")
        except (ValueError, RecursionError):
            records = None  # a line that is not whole JSON: each on its own
        if records is not None and len(records) == len(lines):  # not when a line holds "{...},{...}"
            return [_of(record) for record in records]
    return [unwrap(line) for line in lines]


# A text field's value up to its closing quote or, in a record an excerpt cut short, up to the end of the line.
CUT_FIELD = re.compile(r'"(?:' + "|".join(TEXT_KEYS + TRACE_KEYS) + r')"\s*:\s*"((?:[^"\\]|\\.)*)')
DANGLING_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?$")


def _cut_record(stripped: str) -> Unwrapped | None:
    """The text fields of a JSON record that is not whole (an issue's excerpt cut it mid-value, or the reader cut a
    line past 64 KiB): each field's escaped text as far as it goes."""
    lines: list[str] = []
    for match in CUT_FIELD.finditer(stripped):
        escaped = DANGLING_ESCAPE.sub("", match.group(1))
        try:
            text = json.loads(f'"{escaped}"')
        except ValueError:
            continue
        if text not in EMPTY:
            lines += text.removesuffix("\n").split("\n")
    return Unwrapped(tuple(lines)) if lines else None


def _text_holder(record: dict) -> tuple[dict | None, str]:
    """The object holding the record's text and the text's key ("" when only a traceback field has text)."""
    for holder in (record, *(value for name in NESTED_KEYS if isinstance(value := record.get(name), dict))):
        for key in TEXT_KEYS:
            if isinstance(holder.get(key), str):
                return holder, key
        if any(isinstance(holder.get(name), str) and holder[name] not in EMPTY for name in TRACE_KEYS):
            return holder, ""
    return None, ""


def is_enveloped(head: bytes) -> bool:
    """Most of the first whole lines of a file are JSON log records."""
    lines = [line for line in head.split(b"\n")[:-1] if line.strip()][:SNIFF_LINES]
    if not lines:
        return False
    records = sum(1 for line in lines if unwrap(line.decode("utf-8", "replace")) is not None)
    return records >= ENVELOPE_SHARE * len(lines)


# Docker's json-file driver writes every record so: these keys, in this order, no spaces, and a line's text ending in
# its escaped newline (a record without one is a piece of a longer line). The text is matched as JSON's tokens, plain
# runs and escape pairs, so an escaped backslash before an "n" is not taken for the newline.
DOCKER_RECORD = re.compile(
    rb'^\{"log":"([^"\\\n]*(?:\\.[^"\\\n]*)*?)\\n","stream":"(?:stdout|stderr)","time":"[^"\n]*"\}\r?$', re.M
)
DOCKER_HEAD = b'{"log":"'
# Where no backslash is escaped, every backslash starts an escape, so a record's end is found without its tokens.
DOCKER_TAIL = re.compile(rb'\\n","stream":"(?:stdout|stderr)","time":"[^"\n]*"\}\r?$', re.M)
# A run of escapes; the literal backslash first lets the regex engine skip to each one.
ESCAPES = re.compile(rb"\\(?:u[0-9a-fA-F]{4}|[^u\n])(?:\\(?:u[0-9a-fA-F]{4}|[^u\n]))*")


def docker_text(block: bytes) -> bytes | None:
    """A block of whole lines that are all complete Docker records, as the text lines they hold (one a record, so the
    line numbers stay the file's), by substitutions in C; None when any line is anything else."""
    lines = block.count(b"\n")
    if b"\\\\" in block:
        text, records = DOCKER_RECORD.subn(rb"\1", block)
    elif block.startswith(DOCKER_HEAD) and block.count(b"\n" + DOCKER_HEAD) == lines - 1:
        text, records = DOCKER_TAIL.subn(b"", block)
        text = text.replace(b"\n" + DOCKER_HEAD, b"\n")[len(DOCKER_HEAD) :]
        if text.count(b'"') != text.count(b'\\"'):  # a quote no backslash escapes: more than the text in a line
            return None
    else:
        return None
    if records != lines:
        return None
    if b"\\" in text:
        if b"\\\\" not in text:  # the escape the text needs most (a traceback's quotes), replaced in C
            text = text.replace(b'\\"', b'"')
        if b"\\" in text:
            text = ESCAPES.sub(_unescaped, text)
        if text.count(b"\n") != lines:  # a record holding a newline: read record by record
            return None
    return text


def _unescaped(match: re.Match[bytes]) -> bytes:
    try:
        return json.loads(b'"' + match.group(0) + b'"').encode("utf-8", "replace")
    except ValueError:
        return match.group(0)


@dataclass
class Decoder:
    """Turns the lines of an enveloped file into plain log text, remembering each text line's line in the file. A line
    Docker cut into several records is put back together, on the line of the record where it began."""

    pending: dict[str, tuple[str, int]] = field(default_factory=dict)

    def raw_block(self, block: bytes, first_line: int, decode: Callable[[bytes], str]) -> tuple[bytes, array]:
        """A block of whole lines from the file, the first being line `first_line` + 1: Docker's records in C when
        every line is one and no line is waiting for its rest, else line by line (`decode` turns a line to text)."""
        if not self.pending and (text := docker_text(block)) is not None:
            return text, array("q", range(first_line + 1, first_line + 1 + block.count(b"\n")))
        return self.block([decode(raw) for raw in block.split(b"\n")[:-1]], first_line)

    def block(self, lines: list[str], first_line: int) -> tuple[bytes, array]:
        """`lines`: a block's lines, the first being line `first_line` + 1 of the file. Returns the text
        (newline-ended lines) and, per text line, its line in the file."""
        out: list[str] = []
        where = array("q")
        for number, (raw, record) in enumerate(zip(lines, _parsed(lines), strict=True), start=first_line + 1):
            if record is None:
                out.append(raw)
                where.append(number)
                continue
            texts, line = list(record.lines), number
            held = self.pending.pop(record.stream, None) if record.stream is not None else None
            if held is not None:
                texts = [held[0] + (texts[0] if texts else ""), *texts[1:]]
                line = held[1]
            if not record.complete and record.stream is not None:
                self.pending[record.stream] = ("".join(texts), line)
                continue
            out += texts
            where.extend([line] * len(texts))
        return _joined(out), where

    def flush(self) -> tuple[bytes, array]:
        """Lines still open at the end of the file (a process that died mid-line)."""
        held = sorted(self.pending.values(), key=lambda item: item[1])
        self.pending.clear()
        return _joined([text for text, _ in held]), array("q", [line for _, line in held])


def _joined(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8", "replace") if lines else b""
