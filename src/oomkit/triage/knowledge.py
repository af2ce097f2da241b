"""Phase knowledge mined from vLLM's own source (scripts/gen_vllm_knowledge.py): every message template
vLLM logs or raises, with the function that prints it and that function's phase, and every function
on a start-up phase's path. Loaded once, on first use; `docs/triage-knowledge.md` tells how it is made.

Lines are matched through an index: each template is filed under its rarest word, so a line costs a
few dictionary look-ups and the full patterns of the handful of templates filed under its words."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
# The package's own path inside the file's: a source checkout is often a clone named vllm holding the package vllm
# (".../vllm/vllm/v1/worker/gpu_worker.py"), whose module is the inner one.
FRAME_MODULE = re.compile(r"(?:^|/)(vllm/(?!vllm/)[\w/.]+\.py)$")


@dataclass(frozen=True)
class MessageRow:
    id: str
    pattern: str
    level: str | None
    exception: str | None
    phase: str | None
    is_oom: bool
    kind: str
    versions: tuple[str, ...]
    source: str  # "vllm/v1/worker/gpu_worker.py:Worker.determine_available_memory"

    @property
    def literal_chars(self) -> int:
        return len(re.sub(r"\\(.)", r"\1", self.pattern.replace(".*?", "")))


# The phase of a frame the roots of several phases reach (a helper the steps share): it places nothing.
SHARED = "shared"


@dataclass(frozen=True)
class FrameRow:
    source: str
    phase: str  # a phase, or SHARED
    versions: tuple[str, ...]
    root: str

    @property
    def is_root(self) -> bool:
        return self.phase != SHARED and self.source.rsplit(":", 1)[-1] == self.root


@dataclass(frozen=True)
class _Tables:
    versions: tuple[str, ...]
    messages: tuple[MessageRow, ...]
    by_word: dict[str, tuple[int, ...]]
    frames: dict[tuple[str, str], tuple[FrameRow, ...]]


def _read(name: str) -> dict:
    data = (resources.files("oomkit") / "data" / "vllm_knowledge" / f"{name}.json.gz").read_bytes()
    return json.loads(gzip.decompress(data))


def _expand(spans: list[list[int]], versions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(versions[i] for first, last in spans for i in range(first, last + 1))


@cache
def _tables() -> _Tables:
    raw_messages, raw_frames = _read("messages"), _read("frames")
    versions = tuple(v["version"] for v in raw_messages["meta"]["versions"])
    messages = tuple(
        MessageRow(
            r["id"],
            r["pattern"],
            r["level"],
            r["exception"],
            r["phase"],
            r["is_oom"],
            r["kind"],
            _expand(r["v"], versions),
            r["source"],
        )
        for r in raw_messages["messages"]
    )
    frames: dict[tuple[str, str], list[FrameRow]] = {}
    for r in raw_frames["frames"]:
        module, function = r["source"].rsplit(":", 1)
        frames.setdefault((module, function), []).append(
            FrameRow(r["source"], r["phase"], _expand(r["v"], versions), r["root"])
        )
    return _Tables(
        versions,
        messages,
        _index(messages),
        {key: tuple(sorted(rows, key=_recency(versions), reverse=True)) for key, rows in frames.items()},
    )


def _index(messages: tuple[MessageRow, ...]) -> dict[str, tuple[int, ...]]:
    """Each template under its rarest word (the word fewest templates share), so a line's words
    name few candidates."""
    words_of = [set(WORD.findall(re.sub(r"\\(.)", r"\1", row.pattern))) for row in messages]
    frequency = Counter(word for words in words_of for word in words)
    index: dict[str, list[int]] = {}
    for number, words in enumerate(words_of):
        if words:
            index.setdefault(min(words, key=lambda w: (frequency[w], w)), []).append(number)
    return {word: tuple(numbers) for word, numbers in index.items()}


def _recency(versions: tuple[str, ...]):  # noqa: ANN202 - a sort key
    position = {v: i for i, v in enumerate(versions)}
    return lambda row: (max((position[v] for v in row.versions), default=-1), len(row.versions))


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def match_message(text: str) -> MessageRow | None:
    """The most specific template (the most literal text) that matches the line's message."""
    rows = match_messages(text)
    return rows[0] if rows else None


def match_messages(text: str) -> tuple[MessageRow, ...]:
    """Every template that matches the line with the most literal text: the same message is often
    raised in several places (one helper per kernel family), each with its own function and phase.
    A message quoted only up to the end of one of its sentences matches the templates it begins."""
    return _whole_matches(text) or _cut_matches(text)


def _whole_matches(text: str) -> tuple[MessageRow, ...]:
    tables = _tables()
    best: list[MessageRow] = []
    for word in sorted(set(WORD.findall(text))):
        for number in tables.by_word.get(word, ()):
            row = tables.messages[number]
            if best and row.literal_chars < best[0].literal_chars:
                continue
            if row in best or not _compiled(row.pattern).search(text):
                continue
            best = [*best, row] if best and row.literal_chars == best[0].literal_chars else [row]
    return tuple(best)


SENTENCE_END = re.escape(". ")
"""Where a sentence of a mined template ends (the patterns are re.escape'd literal runs joined by `.*?`)."""
CUT_AT_SENTENCE = re.compile(r"\.\s*$")
MIN_CUT_LITERAL_CHARS = 40
"""A cut message names a template only when its sentences hold this much literal text of it."""


def _cut_matches(text: str) -> tuple[MessageRow, ...]:
    """The templates whose leading sentences are the whole message (an excerpt or an issue that quotes
    "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (969)." and not the advice after
    it), with the most literal text. Only messages that end a sentence at the end of the line."""
    if not CUT_AT_SENTENCE.search(text):
        return ()
    best: list[MessageRow] = []
    best_chars = 0
    cuts = _cuts()
    for word in sorted(set(WORD.findall(text))):
        for number, pattern, chars in cuts.get(word, ()):
            row = _tables().messages[number]
            if chars < best_chars or row in best or not _compiled(pattern).search(text):
                continue
            best, best_chars = ([*best, row], chars) if chars == best_chars else ([row], chars)
    return tuple(best)


@cache
def _cuts() -> dict[str, tuple[tuple[int, str, int], ...]]:
    """Every leading run of whole sentences of every template (its last sentence excluded: that is the
    whole template), filed under the run's rarest word like the templates, with its literal length."""
    messages = _tables().messages
    frequency = Counter(w for row in messages for w in set(WORD.findall(re.sub(r"\\(.)", r"\1", row.pattern))))
    index: dict[str, list[tuple[int, str, int]]] = {}
    for number, row in enumerate(messages):
        parts = row.pattern.split(SENTENCE_END)
        for end in range(1, len(parts)):
            lead = SENTENCE_END.join(parts[:end])
            literal = re.sub(r"\\(.)", r"\1", lead.replace(".*?", ""))
            words = set(WORD.findall(literal))
            if len(literal) >= MIN_CUT_LITERAL_CHARS and words:
                cut = (number, lead + r"\.\s*$", len(literal) + 1)
                index.setdefault(min(words, key=lambda w: (frequency[w], w)), []).append(cut)
    return {word: tuple(cuts) for word, cuts in index.items()}


def frame_phase(path: str, function: str) -> FrameRow | None:
    """The phase of a traceback frame (`File ".../vllm/v1/worker/gpu_model_runner.py", ... in
    capture_model`): the newest release's row when the phase moved between releases."""
    module = FRAME_MODULE.search(path.replace("\\", "/"))
    if module is None:
        return _by_basename(path, function)
    rows = _tables().frames.get((module.group(1), function))
    if rows:
        return rows[0]
    return _roots_by_name().get(function)


def _by_basename(path: str, function: str) -> FrameRow | None:
    """A frame condensed to its file's name ("gpu_model_runner.py:5121, in _get_prompt_logprobs_dict"): the row of
    that function in the vLLM modules of that name, when they agree on its phase."""
    if "/" in path or "\\" in path or not path.endswith(".py"):
        return None
    rows = [
        row
        for module in _modules_by_basename().get(path, ())
        for row in _tables().frames.get((module, function), ())[:1]
    ]
    return rows[0] if rows and len({row.phase for row in rows}) == 1 else None


@cache
def _modules_by_basename() -> dict[str, tuple[str, ...]]:
    modules: dict[str, dict[str, None]] = {}  # insertion-ordered sets
    for module, _function in _tables().frames:
        modules.setdefault(module.rsplit("/", 1)[-1], {})[module] = None
    return {name: tuple(found) for name, found in modules.items()}


@cache
def _roots_by_name() -> dict[str, FrameRow]:
    """A step's root function by its name alone, for a vLLM module the table does not hold (a release before 0.6,
    where `_init_workers_ray` lived in llm_engine.py, or a fork): only names that are a root of one phase in every
    module and release that has them, and nothing else anywhere."""
    phases: dict[str, set[str]] = {}
    first: dict[str, FrameRow] = {}
    for rows in _tables().frames.values():
        for row in rows:
            name = row.source.rsplit(":", 1)[-1]
            phases.setdefault(name, set()).add(row.phase if row.is_root else SHARED)
            first.setdefault(name, row)
    return {
        name: first[name]
        for name, seen in phases.items()
        if len(seen) == 1 and SHARED not in seen and name not in NOT_BY_NAME
    }


# Names too common to stand for one step by name alone (collectives, `step`, `capture`), and names a hand rule
# or a known gap reads otherwise: `_dummy_run` (profiling and every capture), `_init_executor` (device set-up too).
NOT_BY_NAME = frozenset(
    {
        "step",
        "capture",
        "profile",
        "barrier",
        "all_reduce",
        "broadcast_object",
        "device_count",
        "_dummy_run",
        "_init_executor",
    }
)


def known_versions() -> tuple[str, ...]:
    return _tables().versions
