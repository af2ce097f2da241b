"""Inter-token latencies kept as a count per distinct value. A rung at production scale has one ITL
per output token (8 million for 1,000 agent sessions of 20 steps): as an array of doubles that is
64 MB, and `percentile` sorting it made a list of 8 million float objects, another 256 MB at the
very end of the forecast. Every ITL is the time between two step ends, so there are about as many
distinct values as steps; counting them keeps a few MB and gives the same percentiles to the bit."""

from __future__ import annotations

import math
from collections import Counter


def percentile_of_counts(counts: Counter[float], q: float) -> float | None:
    """oomkit.loadrun.stats.percentile of the values `counts` holds (value -> how many times), without
    listing them: the same closest-ranks interpolation between the same two values, so the same
    float. None for no values."""
    n = sum(counts.values())
    if not n:
        return None
    pos = (n - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    x_lo: float | None = None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]  # the sorted values' ranks seen - counts[value] .. seen - 1 are `value`
        if x_lo is None and seen > lo:
            x_lo = value
        if seen > hi:
            assert x_lo is not None  # lo <= hi
            return x_lo + (value - x_lo) * (pos - lo)
    raise AssertionError("hi < n")  # pragma: no cover - pos <= n - 1
