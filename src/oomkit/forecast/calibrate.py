"""The `calibrated` step-time model: fitted on what a run measured (its requests.jsonl), so the CPU
testbed and a user's own GPU run each price steps as they were seen.

    step_ms = base_ms + per_seq_ms x decode sequences + per_prefill_token_ms x prefill tokens

Decode: each answered request's time per output token, (latency - TTFT) / (tokens - 1), against
how many requests of its window (ladder step or rung) overlapped it. Prefill: the time to first
token of requests that ran alone against their uncached prompt tokens, less base_ms for each prefill
step past the first (counted on vLLM's scheduler for the run's server: forecast.prefill_steps); that
line's intercept above base_ms is the per-request overhead outside the engine (HTTP, tokenization,
chat template). Both lines are Theil-Sen fits (median of pairwise slopes): a stream read in bursts
or one slow request moves them little."""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oomkit.errors import InputError
from oomkit.forecast.delivery import MIN_WINDOW_REQUESTS, trip_windows
from oomkit.forecast.prefill_steps import prefill_steps
from oomkit.forecast.steptime import StepLoad
from oomkit.fsio import read_jsonl
from oomkit.loadrun.streams import noted_bursts
from oomkit.rundir import find_run
from oomkit.serial import JsonObject, number_at, to_json_object

MIN_POINTS = 3
MIN_TRIP_WINDOWS = 3  # windows, with requests in flight spread over 1+, before the trip line is fitted
_HINT = "calibrate on a finished `oomkit ladder` or `oomkit bench` run whose answers were streamed"


@dataclass(frozen=True)
class Calibrated:
    name: str
    windows: tuple[int, ...]
    request_overhead_s: float
    base_ms: float
    per_seq_ms: float
    per_prefill_token_ms: float
    source: str
    decode_points: int
    prefill_points: int
    delivery_s_per_running: float = 0.0
    """Added to a request's trip outside the scheduler per request already in its engine."""
    delivery_note: str = ""
    prefill_steps_note: str = ""
    """How the alone requests' prefill steps were counted (or why each counted as one step)."""
    warnings: tuple[str, ...] = ()

    def step_s(self, load: StepLoad) -> float:
        ms = self.base_ms + self.per_seq_ms * load.decode_seqs + self.per_prefill_token_ms * load.prefill_tokens
        return ms / 1000

    def group_step_s(self, loads: Sequence[StepLoad]) -> float:
        return max((self.step_s(load) for load in loads), default=self.base_ms / 1000)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in to_json_object(self).items()}
        out["formula"] = "base_ms + per_seq_ms x decode_seqs + per_prefill_token_ms x prefill_tokens"
        return out


@dataclass(frozen=True)
class _Req:
    label: str
    start_s: float
    end_s: float
    ttft_ms: float
    tpot_ms: float | None
    uncached_tokens: int
    prompt_tokens: int


def calibrate(ref: str | os.PathLike[str], runs_dir: str = "runs") -> Calibrated:
    run = find_run(ref, runs_dir)
    records = read_jsonl(run.path / "requests.jsonl")
    reqs = [r for r in (_req(d) for d in records) if r is not None]
    decode = [(float(_overlap(r, reqs)), r.tpot_ms) for r in reqs if r.tpot_ms is not None]
    alone_reqs = [r for r in reqs if _overlap(r, reqs) == 1]
    if len(decode) < MIN_POINTS or len(alone_reqs) < MIN_POINTS:
        raise InputError(
            f"{run.path}: too few answered requests to calibrate the step time "
            f"({len(decode)} with token gaps, {len(alone_reqs)} that ran alone; {MIN_POINTS} of each needed)",
            hint=_HINT,
        )
    per_seq, base = fit_line(decode)
    base, per_seq = max(0.0, base), max(0.0, per_seq)
    steps, steps_note = prefill_steps(
        run.path, [(r.prompt_tokens, r.prompt_tokens - r.uncached_tokens) for r in alone_reqs]
    )
    # A prompt of n chunks paid n steps' fixed cost: the line is fitted on its TTFT less the n - 1
    # beyond the one every request pays (forecast.prefill_steps).
    extra = [(n - 1) * base for n in steps] if steps else [0.0] * len(alone_reqs)
    prefill = [(float(r.uncached_tokens), r.ttft_ms - x) for r, x in zip(alone_reqs, extra, strict=True)]
    per_token, intercept = fit_line(prefill)
    if per_token < 0:  # a falling line is noise (a run without cached-token counts): flat, at the median
        per_token, intercept = 0.0, statistics.median(y for _, y in prefill)
    if base + per_seq <= 0:
        raise InputError(f"{run.path}: the measured token times fit no positive step time", hint=_HINT)
    per_running_ms, trip_note = _trip_slope(run.path, records)
    return Calibrated(
        name="calibrated",
        windows=(),
        request_overhead_s=max(0.0, intercept - base) / 1000,
        base_ms=base,
        per_seq_ms=per_seq,
        per_prefill_token_ms=per_token,
        source=str(run.path),
        decode_points=len(decode),
        prefill_points=len(alone_reqs),
        delivery_s_per_running=per_running_ms / 1000,
        delivery_note=trip_note,
        prefill_steps_note=steps_note,
        warnings=_burst_warning(records),
    )


def _trip_slope(run_dir: Path, records: list[JsonObject]) -> tuple[float, str]:
    """ms per request already in the engine (never below 0), and how it was fitted or why not."""
    windows = trip_windows(run_dir, records)
    spread = max((w.others_in_flight for w in windows), default=0.0) - min(
        (w.others_in_flight for w in windows), default=0.0
    )
    if len(windows) < MIN_TRIP_WINDOWS or spread < 1:
        return 0.0, (
            f"not fitted: {len(windows)} window(s) with vLLM's queue and prefill histograms and "
            f"{MIN_WINDOW_REQUESTS}+ answers ({MIN_TRIP_WINDOWS} needed, their requests in flight "
            "differing by 1 or more)"
        )
    slope, _ = fit_line([(w.others_in_flight, w.trip_ms) for w in windows])
    return max(0.0, slope), (
        f"{max(0.0, slope):.2f} ms per request already in the engine, fitted on {len(windows)} windows "
        "(client TTFT minus vLLM's mean queue and prefill time, against the requests in flight)"
    )


def _burst_warning(records: list[JsonObject]) -> tuple[str, ...]:
    """When the run's answers did not stream (loadrun.streams), its TTFTs and token gaps measure the
    front-end's backlog: the CPU testbed before its EngineCore was pinned fitted 15-178 ms of request
    overhead that way (docs/forecast.md, run 4)."""
    answers = (d.get("itl_ms") for d in records if d.get("ok") is True)
    found = noted_bursts([float(x) for x in g if isinstance(x, (int, float))] for g in answers if isinstance(g, list))
    if found is None:
        return ()
    return (
        f"{found[0]} of {found[1]} streamed answers of the calibration run arrived in one burst: its TTFT "
        "and token gaps include the server front-end's backlog, so the fitted request overhead and step "
        "times may be too large; calibrate on a run whose answers streamed",
    )


def _req(d: Mapping[str, object]) -> _Req | None:
    """An answered request (a requests.jsonl record) with what the fit needs; anything else is skipped."""
    start, ttft, latency = number_at(d, "started_unix_s"), number_at(d, "ttft_ms"), number_at(d, "latency_ms")
    if d.get("ok") is not True or start is None or ttft is None or latency is None:
        return None
    out = int(number_at(d, "output_tokens") or 0)
    prompt = int(number_at(d, "prompt_tokens") or 0)
    if out > 1 and latency <= ttft:
        return None  # the whole answer came in one read: its "TTFT" is the full response time
    return _Req(
        str(d.get("label")),
        start,
        start + latency / 1000,
        ttft,
        (latency - ttft) / (out - 1) if out > 1 else None,
        max(0, prompt - int(number_at(d, "cached_tokens") or 0)),
        prompt,
    )


def _overlap(r: _Req, reqs: list[_Req]) -> int:
    """Requests of the same window running at r's midpoint, r included."""
    mid = (r.start_s + r.end_s) / 2
    return sum(1 for o in reqs if o.label == r.label and o.start_s <= mid <= o.end_s)


MAX_FIT_POINTS = 1_500  # pairs grow with the square; an even sample of a long run is enough


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Theil-Sen slope and intercept; a flat line at the median when x never varies."""
    pts = points[:: max(1, len(points) // MAX_FIT_POINTS)]
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1 :] if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    return slope, statistics.median(y - slope * x for x, y in pts)
