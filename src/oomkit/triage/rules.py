"""The vocabulary and the types of triage's rules, which are data: markers (`markers.py`) say which
start-up/serving phase a line proves was reached; failures (`failures_memory.py`, `failures.py`) say
what went wrong; `frames.py` places a traceback by its functions. Sources: shared/research/
vllm-internals.md §2-§3 (vLLM 0.6-0.34 source read), cpu-testbed.md (real 0.32 CPU runs), and vLLM
0.32's own source where noted. Every entry has an example line; tests check each example matches
and passes the prefilter."""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM's logo lines: block characters and spaces, then `version X` or `model M`. A match starts only
# where a run of them starts (not `.*` from every block): linear on a 64 KB line of blocks.
LOGO = r"(?:^|(?<=[^█▀▄\s]))\s*[█▀▄][█▀▄\s]*\s"

# Timeline vocabulary, in startup order.
TIMELINE = (
    "environment",
    "distributed_init",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "ready",
    "serving",
)
# Verdict vocabulary.
PHASES = (
    "environment",
    "network_communication",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "timeout",
    "serving_prefill",
    "serving_decode",
    "cache_pressure",
    "not_oom_other",
    "healthy",
    "unknown",
)


@dataclass(frozen=True)
class Marker:
    id: str
    pattern: re.Pattern[str]
    phase: str  # timeline phase this line proves was reached
    after: str  # failure phase of a memory error that comes after this line ("serving" = decide)
    example: str
    source: str


@dataclass(frozen=True)
class Failure:
    id: str
    pattern: re.Pattern[str]
    cls: str  # oom, oom_host, kv, budget, network, environment, timeout, stall, crash, config, pressure, request, http, wrapper, died, dump, exception
    # (stall: a wait that counts only while nothing later shows progress: a marker or a stats line)
    phase: str | None  # fixed verdict phase, or None: from frames and markers
    is_oom: bool
    rank: int  # the strongest failure found is the verdict's cause
    what: str
    example: str
    source: str
    excludes: tuple[str, ...] = ()  # rules this one overrides when both match the same line


def rx(p: str) -> re.Pattern[str]:
    return re.compile(p)


V = "vllm-internals.md"
T = "cpu-testbed.md (vLLM 0.32 CPU)"


def gate(patterns: list[re.Pattern[str]]) -> re.Pattern[str]:
    """One alternation of many patterns (named groups dropped): a line that fails it fails them all,
    so most candidate lines cost one search instead of dozens."""
    return re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[A-Za-z_][A-Za-z0-9_]*>', '(?:', p.pattern)})" for p in patterns))
