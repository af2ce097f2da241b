"""One log line → one Record (several where a page collapsed a log's newlines: `flat.py`): wrappers (docker compose,
kubectl/k9s, journald, Ray) and vLLM's V0/V1 headers peeled off, the raw text kept. Formats:
shared/research/vllm-internals.md §1."""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomkit.logs.envelope import unwrap
from oomkit.logs.flat import FLAT_MIN_CHARS, pieces

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# Colour codes whose ESC byte a copy lost ("[36m(RayWorkerWrapper pid=858)[0m INFO ...") or that syslog escaped
# ("#033[33m"): only SGR's "[N;Nm" forms, which log text does not otherwise hold.
ORPHAN_SGR = re.compile(r"(?:#033)?\[(?:[0-9]{1,3}(?:;[0-9]{1,3}){0,4})m")
# Terminal output pasted as HTML (aha, ansi2html, a browser's copy): colour and weight tags around the
# text. Only formatting tags: a traceback's "<module>" or "<frozen runpy>" stays.
HTML_TAG = re.compile(r"</?(?:font|span|b|strong|i|em|u|code|pre|div|br)\b[^<>]*>", re.IGNORECASE)
HTML_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#39|nbsp);")
RAY_REPEAT = re.compile(r"\s*\[repeated (?P<n>\d+)x across cluster\]\s*$")
# kubectl/k9s log views draw box borders; kubectl --prefix adds "[pod/name/container] ".
K8S_BORDER = re.compile(r"^[│┃|]\s?(?P<rest>.*?)\s*[│┃|]?\s*$")
K8S_PREFIX = re.compile(r"^\[pod/[^\]\s]+\]\s")
# kubectl --timestamps / docker logs -t: RFC 3339 time first. The node's own files under /var/log/pods (CRI's format,
# containerd and CRI-O) add the stream and a tag: "2026-04-10T08:52:19.07+08:00 stderr F <line>" (P: a line the
# runtime cut at 16 KiB, read as its pieces).
RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s(?:(?:stdout|stderr) [FP] )?"
)
# Wrappers that stamp each line with a full date (supervisord, tee-with-date scripts, some
# launchers): "[2024-07-08 15:17:34] ", "2024-07-08 15:17:34,123 ". vLLM's own header never starts
# with a four-digit year, so a line that does carries someone else's stamp first.
DATED = re.compile(r"^\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+(?=\S)")
# FastChat's workers and controller log "%(asctime)s | %(levelname)s | %(name)s | %(message)s", their stdout and
# stderr through loggers named so ("2025-03-24 22:04:27 | ERROR | stderr | Traceback ..."): after the date, the
# level and logger name are FastChat's, and vLLM's own line follows.
FASTCHAT = re.compile(r"^\|\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*\|\s*[\w.\-]+\s*\|\s?")
# docker compose: "service-name_1  | " (v1) or "service-1  | " (v2).
COMPOSE = re.compile(r"^(?P<svc>[A-Za-z0-9][\w.\-]*)\s+\|\s?")
# journald's short format: "Dec 02 15:18:01 host unit[pid]: " (month may be localised: "6月"), and its other
# `journalctl -o` stamps: short-precise's microseconds, short-full's "Mon 2026-12-07 14:10:08 UTC", short-unix's epoch.
JOURNALD = re.compile(
    r"^(?:(?:[A-Z][a-z]{2}|\d{1,2}月)\s+\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
    r"|[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z]{2,5}|\d{9,10}\.\d+) \S+ [\w.@\-/]+(?:\[\d+\])?: "
)
# ... and after an ISO stamp (short-iso, short-iso-precise; syslog files with RFC 3339 times): "host unit[pid]: ".
SYSLOG_SOURCE = re.compile(r"^[\w.\-]+ [\w.@\-/]+\[\d+\]: ")
# Ray actors nest parentheses in the name ("(MapWorker(MapBatches(X)) pid=1)"); copy-paste can lose
# the opening one.
PREFIX = re.compile(r"^\(?(?P<proc>[^\s].{0,120}?) pid=(?P<pid>\d{1,10})\b(?:, ip=(?P<ip>[^)]+))?\)\s*")
HEADER = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?"
    r"\s+\[?(?P<file>[^\s\]]+?):(?P<lineno>\d+)\]\s?(?P<msg>.*)$"
)
# Reporters often paste lines with the timestamp cut: "INFO [file.py:12] msg".
HEADER_NO_TS = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\[(?P<file>[^\s\]:]+)(?::(?P<lineno>\d+))?\]\s+(?P<msg>.*)$"
)
# ... or with the level cut off the start of the line: "11-21 00:12:08 llm_engine.py:624] msg" (a paste that lost its
# first characters): the date, time and "file.py:N]" are vLLM's header all the same.
HEADER_NO_LEVEL = re.compile(
    r"^(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?\s+\[?(?P<file>[^\s\]]+?\.py):(?P<lineno>\d+)\]\s?(?P<msg>.*)$"
)
# ... or with the level cut too: "[file.py:12] msg" (the source's name and line, as vLLM's format prints them).
HEADER_SRC_ONLY = re.compile(r"^\[(?P<file>[\w./-]+\.py):(?P<lineno>\d+)\]\s+(?P<msg>.*)$")
# Python logging's own formats, where an application configures logging for vLLM's loggers
# (VLLM_CONFIGURE_LOGGING=0, LLaMA-Factory, FastChat, notebooks): the documented
# "%(asctime)s - %(name)s - %(levelname)s - %(message)s" (the date is a wrapper stamp, peeled first) and
# basicConfig's default "%(levelname)s:%(name)s:%(message)s".
PY_DASHED = re.compile(
    r"^(?:- )?(?P<name>[A-Za-z_][\w.]*) - (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - (?P<msg>.*)$"
)
PY_BASIC = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<name>[A-Za-z_][\w.]*):(?P<msg>.*)$")
# A reporter's Markdown quote ("> ValueError: ...") and torch.distributed's per-rank prefix on the lines a rank
# prints ("[rank0]: Traceback ...", as the corpus's logs show it): both before the text.
QUOTED = re.compile(r"^(?:>+ ?)+(?=\S)")
# pytest's report of a failing test marks the exception's lines with "E" and an indent ("E       AssertionError: ...");
# vLLM's own tests and CI jobs paste that way. glog's "E1027 15:54:53" has no space after the letter.
PYTEST_E = re.compile(r"^E {3,}(?=\S)")
RANK = re.compile(r"^\[rank(?P<rank>\d{1,5})\]:\s?")
# glog/Abseil's C++ prefix, "E1216 02:12:49.624646 179 model.py:248] msg" (level letter, month and day, time, thread
# id, source), which the programs around vLLM print: Triton's Python backend (which quotes the message: "[vllm] ..."),
# XLA/PJRT on TPU, NIXL, Mooncake, Ray's core workers.
GLOG = re.compile(
    r"^(?P<level>[IWEF])(?P<md>\d{4}) (?P<ts>\d{2}:\d{2}:\d{2})(?:\.\d+)? +\d+ (?P<file>[\w.\-]+):(?P<lineno>\d+)\] ?(?P<msg>.*)$"
)
GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
UVICORN = re.compile(r"^(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+(?P<msg>.*)$")
# vLLM's header after text no wrapper pattern names: a launcher's own stamp ("[INFO ] W-9000-model_1.0-stdout
# MODEL_LOG - ", "vLLM STDOUT: ", "kserve-container "), a table cell's "| ", a bracket a paste left ("[INFO 08-16"), a
# progress bar the line was written after (tqdm draws without a newline), or several records flattened onto one line.
# The level, a month-day date, a time and "file.py:N]" together are vLLM's format whatever comes first.
EMBEDDED_HEADER = re.compile(
    r"(?<![\w-])(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?"
    r"\s+\[?(?P<file>[^\s\]]+?):(?P<lineno>\d+)\]\s?(?P<msg>.*)$"
)
# A stamp that is one name: a container's or a service's ("kserve-container"), an epoch in milliseconds.
WRAPPER_NAME = re.compile(r"[\w.-]+")
# The process prefix right before such a header ("...it/s](EngineCore_DP0 pid=4) ERROR ...").
EMBEDDED_PREFIX = re.compile(r"\((?P<proc>[^\s()][^()]{0,80}?) pid=(?P<pid>\d{1,10})\b[^()]*\)\W*$")
MAX_LINE_CHARS = 65536


@dataclass(frozen=True, slots=True)
class Record:
    """A log line with where it came from. `text` is the line with ANSI, CR refreshes and
    wrappers removed; `msg` is the message after vLLM's prefix and header."""

    file: str
    line: int
    raw: str
    text: str
    proc: str | None
    pid: int | None
    level: str | None
    time: str | None
    msg: str
    repeat: int = 1
    src: str | None = None  # vLLM source "file.py:123" from the header, when present

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}"


def clean(raw: str) -> str:
    """ANSI colour out; of carriage-return refreshes (tqdm) keep the last non-empty frame."""
    text = ANSI.sub("", raw.rstrip("\n"))
    if "[0m" in text or "[0;0m" in text:  # each coloured span ends in a reset: a cheap test on every line
        text = ORPHAN_SGR.sub("", text)
    if "\r" in text:
        frames = [f for f in text.split("\r") if f.strip()]
        text = frames[-1] if frames else ""
    if "</" in text:
        text = _strip_html(text)
    return text.replace("\x00", "")


def _strip_html(text: str) -> str:
    stripped = HTML_TAG.sub("", text)
    if stripped == text:
        return text
    return HTML_ENTITY.sub(lambda m: ENTITIES[m.group(0)], stripped)


ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&#39;": "'", "&nbsp;": " "}


def _strip_wrappers(text: str) -> str:
    for _ in range(3):  # wrappers nest: journald around docker compose, kubectl around Ray
        before = text
        m = RFC3339.match(text) or DATED.match(text)
        if m:
            text = text[m.end() :]
            if text.startswith("|") and (m := FASTCHAT.match(text)):
                text = text[m.end() :]
            elif m := SYSLOG_SOURCE.match(text):
                text = text[m.end() :]
        m = JOURNALD.match(text)
        if m:
            text = text[m.end() :]
        m = K8S_PREFIX.match(text)
        if m:
            text = text[m.end() :]
        m = K8S_BORDER.match(text)
        if m and (text.startswith("│") or text.startswith("┃")):
            text = m.group("rest")
        m = COMPOSE.match(text)
        if m and not text.startswith(("INFO", "DEBUG", "WARNING", "ERROR", "CRITICAL")):
            text = text[m.end() :]
        if text == before:
            break
    return text


def parse_lines(raw: str, file: str = "-", line: int = 0) -> list[Record]:
    """The records of one line: one, or several when a web page collapsed a log's newlines (`flat.pieces`) or the line
    is a collector's JSON record holding several lines (`envelope.unwrap`); they share the line's number."""
    if raw[:1] == "{" and (record := unwrap(raw)) is not None:  # a JSON record in a log that is not all records
        return [parse_line(text, file, line) for text in record.lines] or [parse_line("", file, line)]
    if len(raw) < FLAT_MIN_CHARS:
        return [parse_line(raw, file, line)]
    return [parse_line(piece, file, line) for piece in pieces(raw[:MAX_LINE_CHARS])]


def parse_line(raw: str, file: str = "-", line: int = 0) -> Record:
    if len(raw) > MAX_LINE_CHARS:
        raw = raw[:MAX_LINE_CHARS]
    text = _strip_wrappers(clean(raw))
    repeat = 1
    m = RAY_REPEAT.search(text)
    if m:
        repeat = int(m.group("n"))
        text = text[: m.start()]
    body, proc, pid = text.lstrip(), None, None  # a quoted or indented paste: the header is after the indent
    if body.startswith(">"):
        body = QUOTED.sub("", body, count=1)
    elif body.startswith("E  ") and (m := PYTEST_E.match(body)):
        body = body[m.end() :]
    if body.startswith("[rank") and (m := RANK.match(body)):
        proc, body = f"rank{m.group('rank')}", body[m.end() :]
    for _ in range(2):  # ≥0.34 Ray lines can carry two prefixes; ≥0.32 the prefix may follow a VLLM_LOGGING_PREFIX
        m = PREFIX.match(body)
        if not m:
            break
        proc, pid = proc or m.group("proc"), pid or int(m.group("pid"))
        body = body[m.end() :]
    level = time = src = None
    msg = body
    m = HEADER.match(body) or HEADER_NO_TS.match(body)
    if m:
        level, msg = _norm_level(m.group("level")), m.group("msg")
        time = m.groupdict().get("ts")
        src = f"{m.group('file')}:{m.group('lineno') or ''}"
    elif m := HEADER_NO_LEVEL.match(body):
        msg, time, src = m.group("msg"), m.group("ts"), f"{m.group('file')}:{m.group('lineno')}"
    elif m := HEADER_SRC_ONLY.match(body):
        msg, src = m.group("msg"), f"{m.group('file')}:{m.group('lineno')}"
    elif m := GLOG.match(body):
        level, msg, src = (
            GLOG_LEVELS[m.group("level")],
            _unquote(m.group("msg")),
            f"{m.group('file')}:{m.group('lineno')}",
        )
    elif m := PY_DASHED.match(body) or PY_BASIC.match(body):
        level, msg, src = m.group("level"), m.group("msg"), m.group("name")
    elif m := UVICORN.match(body):
        level, msg = m.group("level"), m.group("msg")
    elif (m := _embedded(body)) is not None:
        level, msg, time = m.group("level"), m.group("msg"), m.group("ts")
        src = f"{m.group('file')}:{m.group('lineno')}"
        if proc is None and (p := EMBEDDED_PREFIX.search(body, 0, m.start())):
            proc, pid = p.group("proc"), int(p.group("pid"))
    return Record(
        file=file,
        line=line,
        raw=raw.rstrip("\n"),
        text=text,
        proc=proc,
        pid=pid,
        level=level,
        time=time,
        msg=msg.strip(),
        repeat=repeat,
        src=src,
    )


def _embedded(body: str) -> re.Match[str] | None:
    """vLLM's header after a wrapper's text, when the line holds exactly one record."""
    # A cheap test first: a level word followed by a space somewhere in the line.
    if not ("INFO " in body or "ERROR " in body or "WARNING " in body or "DEBUG " in body or "CRITICAL " in body):
        return None
    m = EMBEDDED_HEADER.search(body)
    if m is None or not _wrapper_before(body[: m.start()]) or EMBEDDED_HEADER.search(m.group("msg")):
        return None  # several records on a line too short for `flat.pieces` to cut are read as the line
    return m


def _wrapper_before(prefix: str) -> bool:
    """Text before an embedded header that is only a stamp or a delimiter. A progress bar or a traceback's text is a
    record of its own, flattened onto the line, and keeps the line as it is."""
    prefix = prefix.rstrip()
    if len(prefix) > 60 or "%|" in prefix or "it/s" in prefix or '"' in prefix:
        return False
    return not prefix or prefix[-1] in "|:-[]>*,)" or WRAPPER_NAME.fullmatch(prefix) is not None


def _norm_level(level: str) -> str:
    return "WARNING" if level == "WARN" else level


def _unquote(msg: str) -> str:
    """Triton quotes each message and escapes its newlines: the first line, out of its quotes, is the message."""
    if len(msg) < 2 or not msg.startswith('"'):
        return msg
    return msg[1:].split("\\n", 1)[0].removesuffix('"')
