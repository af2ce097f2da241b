"""Sizes, times and numbers as oomkit prints them: the byte constants, ceiling division, the size
parser and one formatter per unit. Every formatter takes a plain number in the unit its name says
(bytes, milliseconds, seconds, a fraction or a percent, tokens), rounds it to at most three decimals,
writes the unit after it and turns None into "-"."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
NONE = "-"
"""What every formatter prints for a value that was not measured."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[KMGT])?\s*$", re.I)
_SIZE_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": KIB,
    "mi": MIB,
    "gi": GIB,
    "ti": TIB,
}


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for integers (blocks needed for a number of tokens, say)."""
    return -(-a // b)


def parse_size(text: str) -> int:
    """Bytes from "67108864", "64MiB", "4 GiB", "1.5G" or "20G": K/M/G/T are powers of 1000,
    Ki/Mi/Gi/Ti powers of 1024, a trailing B is optional. Raises ValueError with the text."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a byte count (e.g. 67108864, 4GiB, 20G)")
    unit = (m.group(2) or "").lower().rstrip("b")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def fmt_number(x: float | None, decimals: int = 3) -> str:
    """A plain number rounded to at most `decimals` places (0 to 3), trailing zeros dropped:
    1.0 -> "1", 0.69808 -> "0.698", 2.50 -> "2.5", 1950691328 -> "1950691328"."""
    if x is None:
        return NONE
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)
    text = f"{x:.{max(0, min(decimals, 3))}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def fmt_count(x: float | None) -> str:
    """A count (requests, preemptions, concurrent dialogs): 1.0 -> "1", a mean such as 1.5 keeps one decimal."""
    return fmt_number(x, 1)


def fmt_pct(value: float | None, *, fraction: bool = True, decimals: int = 1, signed: bool = False) -> str:
    """A share as a percent: a fraction by default (0.698 -> "69.8%"), or a value that already is a
    percent with fraction=False (25.0 -> "25%"). signed=True writes "+" before a gain."""
    if value is None:
        return NONE
    pct = value * 100 if fraction else value
    text = fmt_number(pct, decimals)
    return ("+" if signed and pct > 0 and text != "0" else "") + text + "%"


def fmt_gib(n_bytes: float | None, decimals: int = 2) -> str:
    """Bytes in GiB: 1950691328 -> "1.82 GiB"."""
    return NONE if n_bytes is None else f"{n_bytes / GIB:.{decimals}f} GiB"


def fmt_gib_value(gib: float | None) -> str:
    """A figure that already is in GiB (vLLM logs them so): 0.0625 -> "0.06 GiB"."""
    return NONE if gib is None else f"{gib:.2f} GiB"


def fmt_size(n_bytes: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number at 1 or more: "1.82 GiB", "64.00 MiB", "512 B"."""
    if n_bytes is None:
        return NONE
    for unit, div in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n_bytes) >= div:
            return f"{n_bytes / div:.2f} {unit}"
    return f"{fmt_number(n_bytes, 0)} B"


def fmt_ms(ms: float | None) -> str:
    """Milliseconds: whole ones from 10 ms up ("779 ms"), one decimal below ("7.5 ms")."""
    if ms is None:
        return NONE
    return f"{ms:.0f} ms" if abs(ms) >= 10 else f"{fmt_number(ms, 1)} ms"


def fmt_s(seconds: float | None) -> str:
    """Seconds: one decimal ("32.2 s"), whole ones from 100 s up, two decimals below 1 s ("0.35 s")."""
    if seconds is None:
        return NONE
    if abs(seconds) >= 100:
        return f"{seconds:.0f} s"
    return f"{fmt_number(seconds, 1 if abs(seconds) >= 1 else 2)} s"


def fmt_tokens(n: float | None) -> str:
    """A token count: 1024 -> "1024 tokens", 1 -> "1 token"."""
    if n is None:
        return NONE
    text = fmt_count(n)
    return f"{text} token" if text == "1" else f"{text} tokens"


def fmt_rate(per_s: float | None, what: str = "req") -> str:
    """A rate per second, three significant figures at most: 12.345 -> "12.3 req/s", 0.456 -> "0.46 req/s"."""
    if per_s is None:
        return NONE
    decimals = 0 if abs(per_s) >= 100 else 1 if abs(per_s) >= 10 else 2
    return f"{fmt_number(per_s, decimals)} {what}/s"


FORMATS: dict[str, Callable[[float | None], str]] = {
    "bytes": fmt_size,
    "gib": fmt_gib_value,
    "fraction": fmt_pct,
    "percent": lambda v: fmt_pct(v, fraction=False),
    "ms": fmt_ms,
    "s": fmt_s,
    "tokens": fmt_tokens,
    "count": fmt_count,
}
"""Formatter per unit name (the names oomkit.compare.verdict.METRICS uses, and a few more)."""

# A figure's unit from how its key ends: run-folder JSON names keys this way (ttft_ms_p95,
# peak_memory_bytes, reserve_pct, kv_cache_tokens, model_weights_gib, ready_s ...).
_SUFFIXES = (
    (re.compile(r"_bytes$"), "bytes"),
    (re.compile(r"_gib$"), "gib"),
    (re.compile(r"_pct$"), "percent"),
    (re.compile(r"(^|_)ms(_p\d+)?$|_ms_"), "ms"),
    (re.compile(r"_s$"), "s"),
    (re.compile(r"_tokens$|_model_len$|^max_model_len$"), "tokens"),
    (re.compile(r"_(rate|share|usage|attainment)$|^kv_usage$"), "fraction"),
)


def unit_of(key: str) -> str | None:
    """The unit of a figure named `key`, from its suffix; None when the name does not say."""
    return next((unit for pattern, unit in _SUFFIXES if pattern.search(key)), None)


def fmt_value(value: object, unit: str | None = None) -> str:
    """A value in its unit (a name from FORMATS); numbers without a unit as fmt_number, text as is."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        fmt = FORMATS.get(unit or "")
        return fmt(value) if fmt else fmt_number(value)
    return str(value)


def fmt_figure(key: str, value: object) -> str:
    """A figure named `key` in the unit its name says: ("ttft_ms_p95", 779.4097) -> "779 ms"."""
    return fmt_value(value, unit_of(key))
