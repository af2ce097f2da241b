"""Client-side figures over a set of request records, and goodput against SLOs."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from oomkit.client.records import RequestRecord
from oomkit.errors import UsageError
from oomkit.serial import JsonObject

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
    return _within({"ttft_ms": rec.ttft_ms, "tpot_ms": tpot_ms(rec), "latency_ms": rec.latency_ms}, slos)


def _within(values: dict[str, float | None], slos: dict[str, float]) -> bool:
    """The figures of one answered request against every bound."""
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
    client_lost: int = 0
    """Requests lost with a client process or actor that died (--clients); never server errors."""

    def to_dict(self) -> JsonObject:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _opt(v: float | None) -> float:
    return math.nan if v is None else v


def _val(v: float) -> float | None:
    return None if math.isnan(v) else v


class ClientTally:
    """The client figures of a window, added up request by request in compact arrays (a few
    floats per request, NaN for a missing one), so a long bench does not keep every record in
    memory (benchmarks/long_run.py). The first failed record is kept: it names the failure."""

    def __init__(self, records: Iterable[RequestRecord] = ()):
        self.requests = self.ok = self.output_tokens = self.prompt_tokens = self.retries = 0
        self.tool_checks = self.tool_checks_valid = 0
        self.cached_tokens: int | None = None
        self.errors_by_kind: Counter[str] = Counter()
        # One entry per answered request, aligned: SLOs are judged per request.
        self.ttft_ms, self.tpot_ms, self.latency_ms = array("d"), array("d"), array("d")
        self.itl_ms = array("d")
        self.first_failed: RequestRecord | None = None
        self.client_lost = 0
        """Requests a dead client process or actor never finished (--clients): not sent errors."""
        for rec in records:
            self.add(rec)

    @property
    def failed(self) -> tuple[RequestRecord, ...]:
        return (self.first_failed,) if self.first_failed else ()

    def add(self, rec: RequestRecord) -> None:
        if rec.error_kind == "client_lost":  # the client died, not the server: counted apart
            self.client_lost += 1
            return
        self.requests += 1
        if rec.ok:
            self.ok += 1
            self.ttft_ms.append(_opt(rec.ttft_ms))
            self.tpot_ms.append(_opt(tpot_ms(rec)))
            self.latency_ms.append(_opt(rec.latency_ms))
            self.itl_ms.extend(rec.itl_ms)
        elif self.first_failed is None:
            self.first_failed = rec
        if rec.error_kind:
            self.errors_by_kind[rec.error_kind] += 1
        if rec.tool_check is not None:
            self.tool_checks += 1
            self.tool_checks_valid += rec.tool_check.valid
        if rec.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + rec.cached_tokens
        self.output_tokens += rec.output_tokens or 0
        self.prompt_tokens += rec.prompt_tokens or 0
        self.retries += rec.retries

    def merge(self, other: ClientTally) -> ClientTally:
        for name in (
            "requests",
            "ok",
            "output_tokens",
            "prompt_tokens",
            "retries",
            "tool_checks",
            "tool_checks_valid",
            "client_lost",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + other.cached_tokens
        self.errors_by_kind.update(other.errors_by_kind)
        for name in ("ttft_ms", "tpot_ms", "latency_ms", "itl_ms"):
            getattr(self, name).extend(getattr(other, name))
        self.first_failed = self.first_failed or other.first_failed
        return self

    def stats(self, duration_s: float | None = None, slos: dict[str, float] | None = None) -> ClientStats:
        ttft = [v for v in self.ttft_ms if not math.isnan(v)]
        lat = [v for v in self.latency_ms if not math.isnan(v)]
        tpots = [v for v in self.tpot_ms if not math.isnan(v)]
        met = (
            sum(
                _within({"ttft_ms": _val(a), "tpot_ms": _val(b), "latency_ms": _val(c)}, slos)
                for a, b, c in zip(self.ttft_ms, self.tpot_ms, self.latency_ms, strict=False)
            )
            if slos
            else None
        )
        rate = (lambda n: n / duration_s) if duration_s else (lambda n: None)
        return ClientStats(
            requests=self.requests,
            ok=self.ok,
            errors=self.requests - self.ok,
            errors_by_kind=dict(self.errors_by_kind),
            ttft_ms_p50=percentile(ttft, 50),
            ttft_ms_p95=percentile(ttft, 95),
            ttft_ms_p99=percentile(ttft, 99),
            latency_ms_p50=percentile(lat, 50),
            latency_ms_p95=percentile(lat, 95),
            tpot_ms_p50=percentile(tpots, 50),
            itl_ms_p50=percentile(self.itl_ms, 50),
            itl_ms_p95=percentile(self.itl_ms, 95),
            output_tokens=self.output_tokens,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            output_tokens_per_s=rate(self.output_tokens),
            tool_checks=self.tool_checks,
            tool_checks_valid=self.tool_checks_valid,
            retries=self.retries,
            slo_met=met,
            slo_attainment=(met / self.requests) if met is not None and self.requests else None,
            goodput_rps=rate(met) if met is not None else None,
            client_lost=self.client_lost,
        )


def summarise(
    records: Iterable[RequestRecord], duration_s: float | None = None, slos: dict[str, float] | None = None
) -> ClientStats:
    return ClientTally(records).stats(duration_s, slos)
