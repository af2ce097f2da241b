"""Required literals of a regular expression: a set of strings one of which every match contains.

The prefilter is built from the rules this way instead of from a hand list of generic keywords
("tokens", "ngine"): those let every stats line and request line of a long-running server through,
and each such line costs Python time. A key derived from the rules lets through only lines some
rule can match, and it follows the rules when they change."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, cast

# The standard library's own regex parser: private, but the same tree since 3.11 (the re package
# split it out of sre_parse); typed as Any because typeshed does not describe it.
P: Any = importlib.import_module("re._parser")
C: Any = importlib.import_module("re._constants")

MIN_LITERAL_CHARS = 3  # shorter literals ("(", "at") would let most lines through
MAX_FORKS = 16  # alternatives a literal run may fork into before it is cut


@dataclass(frozen=True, order=True)
class Literal:
    text: str
    ignore_case: bool = False


Need = frozenset[Literal]


def required_literals(pattern: re.Pattern[str]) -> Need | None:
    """Literals one of which every match of `pattern` contains, or None when there is no such set
    with every literal at least MIN_LITERAL_CHARS long (the pattern then cannot be prefiltered)."""
    tree = P.parse(pattern.pattern, pattern.flags & ~re.UNICODE)
    return _sequence(list(tree), bool(pattern.flags & re.IGNORECASE))


def _sequence(items: list, ignore_case: bool) -> Need | None:
    """Every maximal run of adjacent literal text must appear in a match (a run may fork where a
    small alternation of plain words sits: "t(?:akes|ook) " gives "takes " and "took "); so must
    one of each mandatory sub-part's literals. The most selective of these is the answer."""
    candidates: list[Need] = []
    run: set[str] = {""}

    def flush() -> None:
        if min(len(text) for text in run) >= MIN_LITERAL_CHARS:
            candidates.append(frozenset(Literal(text, ignore_case) for text in run))
        run.clear()
        run.add("")

    for op, arg in items:
        if op is C.AT:
            continue  # an anchor has no width: the characters either side stay adjacent
        words = _words(op, arg)
        if words is not None and len(run) * len(words) <= MAX_FORKS:
            run = {head + word for head in run for word in words}
            continue
        flush()
        need = _part(op, arg, ignore_case)
        if need is not None:
            candidates.append(need)
    flush()
    return max(candidates, key=_selectivity, default=None)


def _words(op: object, arg: object) -> set[str] | None:
    """The strings a part matches when it is plain text or a small alternation of plain text."""
    if op is C.LITERAL:
        return {chr(arg)}  # type: ignore[arg-type]
    if op is C.IN and all(kind is C.LITERAL for kind, _ in arg):  # type: ignore[attr-defined]
        return {chr(char) for _, char in arg}  # type: ignore[attr-defined] # a class of a few characters: "[45]"
    if op is C.SUBPATTERN and not arg[1] and not arg[2]:  # type: ignore[index]
        return _all_words(list(arg[3]))  # type: ignore[index]
    if op is C.BRANCH:
        found = [_all_words(list(alt)) for alt in arg[1]]  # type: ignore[index]
        if any(words is None for words in found):
            return None
        return set().union(*found)  # type: ignore[arg-type]
    return None


def _all_words(items: list) -> set[str] | None:
    words: set[str] = {""}
    for op, arg in items:
        part = _words(op, arg)
        if part is None or len(words) * len(part) > MAX_FORKS:
            return None
        words = {head + word for head in words for word in part}
    return words


def _part(op: object, arg: object, ignore_case: bool) -> Need | None:
    if op is C.SUBPATTERN:
        _group, add_flags, del_flags, sub = cast(tuple[Any, int, int, Any], arg)
        case = (ignore_case or bool(add_flags & re.IGNORECASE)) and not del_flags & re.IGNORECASE
        return _sequence(list(sub), case)
    if op is C.BRANCH:
        alternatives = [_sequence(list(alt), ignore_case) for alt in arg[1]]  # type: ignore[index]
        if any(need is None for need in alternatives):
            return None  # one branch without a literal: the whole alternation has none
        return frozenset().union(*alternatives)  # type: ignore[arg-type]
    if op in (C.MAX_REPEAT, C.MIN_REPEAT) and arg[0] >= 1:  # type: ignore[index]
        return _sequence(list(arg[2]), ignore_case)  # type: ignore[index]
    return None


def _selectivity(need: Need) -> tuple[int, int]:
    """Prefer the set whose shortest literal is longest, then the smaller set."""
    return (min(len(lit.text) for lit in need), -len(need))


def distinct_literals(needs: list[Need]) -> list[Literal]:
    """Every literal of the needs, less those a shorter kept one is inside (a line holding the
    longer one holds the shorter one)."""
    literals = sorted({lit for need in needs for lit in need}, key=lambda lit: (len(lit.text), lit.text))
    kept: list[Literal] = []
    for lit in literals:
        if not any(_covers(other, lit) for other in kept):
            kept.append(lit)
    return kept


def key_pattern(needs: list[Need]) -> str:
    """One alternation of every literal (case-folded ones in a (?i:) group), in a syntax both re
    and RE2 accept."""
    kept = distinct_literals(needs)
    return "|".join(f"(?i:{re.escape(lit.text)})" if lit.ignore_case else re.escape(lit.text) for lit in kept)


def _covers(short: Literal, long: Literal) -> bool:
    """A line holding `long` also holds `short`, so `long` adds nothing to the alternation."""
    if short.ignore_case:
        return short.text.lower() in long.text.lower()
    return not long.ignore_case and short.text in long.text


def ere_pattern(needs: list[Need]) -> str:
    """The same alternation as key_pattern, in POSIX ERE (grep -E): case-folded literals spelled
    as bracket expressions. Benchmarks time grep with it, so both read the same lines."""
    literals = sorted({lit for need in needs for lit in need}, key=lambda lit: (len(lit.text), lit.text))
    kept: list[Literal] = []
    for lit in literals:
        if not any(_covers(other, lit) for other in kept):
            kept.append(lit)
    return "|".join(_ere_literal(lit) for lit in kept)


def _ere_literal(lit: Literal) -> str:
    out = []
    for char in lit.text:
        if lit.ignore_case and char.lower() != char.upper():
            out.append(f"[{char.upper()}{char.lower()}]")
        elif char in ".[]{}()\\*+?^$|":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)
