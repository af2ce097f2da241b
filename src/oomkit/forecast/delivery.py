"""The part of a request's trip outside vLLM's scheduler that grows with the requests already in its
engine: the windows of a measured run that forecast.calibrate fits it on.

vLLM's own per-request histograms split a request's time to first token (TTFT, from its arrival in
the API server's engine client to the first token processed there; vllm/v1/metrics/stats.py) into
the scheduler's queue (`request_queue_time_seconds`: queued to scheduled, both engine-core events)
and prefill (`request_prefill_time_seconds`: scheduled to the engine core's first-token timestamp).
What the client's TTFT holds beyond those two is the trip outside the scheduler: HTTP, template and
tokenization, the request's way into the engine core and the first token's way back. The forecast's
scheduler prices queue and prefill itself; the trip is `request_overhead_s` (fitted on requests that
ran alone) plus `delivery_s_per_running` per request already in the engine (the slope of the trip
against the requests in flight, over the run's windows).

On the CPU testbed the trip grew from about 8 ms alone to 31-33 ms with seven others in flight
(3.3 ms per running request, prefix-heavy profile; docs/forecast.md, "Run 4's TTFT misses"), while
the API server's process used a fifth of a core: the requests' way through the engine core, which
shares its core with the model, not the API server's preprocessing."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from oomkit.fsio import read_jsonl
from oomkit.serial import JsonObject, number_at

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
MIN_WINDOW_REQUESTS = 3


@dataclass(frozen=True)
class TripWindow:
    """One window of the run (a ladder rung, a bench step) as the fit sees it."""

    label: str
    others_in_flight: float  # mean over its requests of the others in flight when each was sent
    trip_ms: float  # mean client TTFT minus vLLM's mean queue and prefill time


def trip_windows(run_dir: Path, records: list[JsonObject]) -> list[TripWindow]:
    """The run's windows with MIN_WINDOW_REQUESTS+ answers and vLLM's queue and prefill histograms
    in its metrics.jsonl (none when it has no such file)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return []
    samples = read_jsonl(metrics)
    return [w for w in (_window(label, records, samples) for label in _labels(records)) if w is not None]


def _labels(records: Iterable[JsonObject]) -> list[str]:
    return list(dict.fromkeys(str(d.get("label")) for d in records if d.get("ok") is True))


def _window(label: str, records: list[JsonObject], samples: list[JsonObject]) -> TripWindow | None:
    sent = [_span(d) for d in records if d.get("label") == label and d.get("ok") is True]
    spans = [s for s in sent if s is not None]
    if len(spans) < MIN_WINDOW_REQUESTS:
        return None
    queue_ms, prefill_ms = _mean_ms(label, samples, QUEUE), _mean_ms(label, samples, PREFILL)
    if queue_ms is None or prefill_ms is None:
        return None
    others = statistics.fmean(sum(1 for o in spans if o is not s and o[0] <= s[0] < o[1]) for s in spans)
    ttft_ms = statistics.fmean(s[2] for s in spans)
    return TripWindow(label, others, ttft_ms - queue_ms - prefill_ms)


def _span(d: Mapping[str, object]) -> tuple[float, float, float] | None:
    """(sent, ended, TTFT ms) of an answered request."""
    start, ttft, latency = number_at(d, "started_unix_s"), number_at(d, "ttft_ms"), number_at(d, "latency_ms")
    if start is None or ttft is None or latency is None:
        return None
    return start, start + latency / 1000, ttft


def _mean_ms(label: str, samples: list[JsonObject], family: str) -> float | None:
    """The histogram's mean over the window: its sum and count from the sample before the window's
    first to the window's last (every engine's series added up)."""
    idx = [i for i, s in enumerate(samples) if s.get("label") == label]
    if not idx:
        return None
    before, last = samples[max(0, idx[0] - 1)], samples[idx[-1]]
    total = _family(last, family + "_sum") - _family(before, family + "_sum")
    count = _family(last, family + "_count") - _family(before, family + "_count")
    return total / count * 1000 if count >= MIN_WINDOW_REQUESTS else None


def _family(sample: JsonObject, name: str) -> float:
    values = sample.get("samples")
    if not isinstance(values, dict):
        return 0.0
    return sum(float(v) for k, v in values.items() if k.split("{")[0] == name and isinstance(v, (int, float)))
