"""The block prefilter. RE2 (google-re2, a dependency) runs the key as a DFA at several hundred
MB/s; where it cannot be installed, or with OOMKIT_PREFILTER=re, Python's re reads the same lines
at a few MB/s (it tries the 180-way alternation at every byte; per-literal `bytes.find` was tried
and is no faster with this many literals)."""

from __future__ import annotations

import os
import re
from functools import lru_cache

from oomkit.triage.prefilter import KEY_BYTES, KEY_PATTERN

KEY_DFA_BYTES = 64 << 20


@lru_cache(maxsize=1)
def scan_key() -> re.Pattern[bytes]:
    if os.environ.get("OOMKIT_PREFILTER") == "re":
        return KEY_BYTES
    try:
        import re2
    except ImportError:
        return KEY_BYTES
    options = re2.Options()
    # RE2's default budget (8 MiB) holds the key's DFA only just: past it RE2 logs "DFA out of memory" on every search
    # and runs the slower NFA. The key has no groups a caller reads.
    options.max_mem = KEY_DFA_BYTES
    options.never_capture = True
    try:
        compiled: re.Pattern[bytes] = re2.compile(KEY_PATTERN.encode(), options)
    except Exception:  # noqa: BLE001 - an RE2 build that rejects the pattern falls back to re
        return KEY_BYTES
    return compiled


def engine_name() -> str:
    return "re" if scan_key() is KEY_BYTES else "re2"
