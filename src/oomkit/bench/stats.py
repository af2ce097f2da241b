"""Client-side figures over a set of request records, and goodput against SLOs."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from oomkit.client.records import RequestRecord
from oomkit.errors import UsageError

# SLO names follow `vllm bench serve --goodput` (ttft, tpot, e2el in ms; peers.md §4.8), spelled
# with their unit; tpot = (latency - ttft) / (output tokens - 1), as vLLM defines it.
SLO_KEYS = ("ttft_ms", "tpot_ms", "latency_ms")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def tpot_ms(rec: RequestRecord) -> float | None:
    if rec.ttft_ms is None or rec.latency_ms is None or not rec.output_tokens or rec.output_tokens < 2:
        return None
    return (rec.latency_ms - rec.ttft_ms) / (rec.output_tokens - 1)


def parse_slos(items: Iterable[str]) -> dict[str, float]:
    """`ttft_ms=500` style pairs from the command line."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise UsageError(f"--slo {item!r}: expected NAME=MS with NAME one of {', '.join(SLO_KEYS)}")
        try:
            out[key] = float(raw)
        except ValueError:
            raise UsageError(f"--slo {item!r}: {raw!r} is not a number of milliseconds") from None
        if out[key] <= 0:
            raise UsageError(f"--slo {item!r}: the bound must be positive")
    return out


def meets(rec: RequestRecord, slos: dict[str, float]) -> bool:
    if not rec.ok:
        return False  # an error never meets an SLO (as in vLLM and GuideLLM)
    values = {"ttft_ms": rec.ttft_ms, "tpot_ms": tpot_ms(rec), "latency_ms": rec.latency_ms}
    for key, bound in slos.items():
        v = values[key]
        if v is None:
            if key == "tpot_ms":
                continue  # fewer than two output tokens: there is no decode time to judge
            return False
        if v > bound:
            return False
    return True


@dataclass(frozen=True)
class ClientStats:
    requests: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    ttft_ms_p50: float | None = None
    ttft_ms_p95: float | None = None
    ttft_ms_p99: float | None = None
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    tpot_ms_p50: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p95: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    output_tokens_per_s: float | None = None
    tool_checks: int = 0
    tool_checks_valid: int = 0
    retries: int = 0
    slo_met: int | None = None
    slo_attainment: float | None = None
    goodput_rps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarise(records: Sequence[RequestRecord], duration_s: float | None = None,
              slos: dict[str, float] | None = None) -> ClientStats:
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    lat = [r.latency_ms for r in ok if r.latency_ms is not None]
    itl = [g for r in ok for g in r.itl_ms]
    tpots = [t for r in ok if (t := tpot_ms(r)) is not None]
    checks = [r.tool_check for r in records if r.tool_check is not None]
    out_tokens = sum(r.output_tokens or 0 for r in records)
    cached = [r.cached_tokens for r in records if r.cached_tokens is not None]
    met = sum(meets(r, slos) for r in records) if slos else None
    rate = (lambda n: n / duration_s) if duration_s else (lambda n: None)
    return ClientStats(
        requests=len(records), ok=len(ok), errors=len(records) - len(ok),
        errors_by_kind=dict(Counter(r.error_kind for r in records if r.error_kind)),
        ttft_ms_p50=percentile(ttft, 50), ttft_ms_p95=percentile(ttft, 95), ttft_ms_p99=percentile(ttft, 99),
        latency_ms_p50=percentile(lat, 50), latency_ms_p95=percentile(lat, 95), tpot_ms_p50=percentile(tpots, 50),
        itl_ms_p50=percentile(itl, 50), itl_ms_p95=percentile(itl, 95), output_tokens=out_tokens,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in records), cached_tokens=sum(cached) if cached else None,
        output_tokens_per_s=rate(out_tokens), tool_checks=len(checks), tool_checks_valid=sum(c.valid for c in checks),
        retries=sum(r.retries for r in records), slo_met=met,
        slo_attainment=(met / len(records)) if met is not None and records else None,
        goodput_rps=rate(met) if met is not None else None)
