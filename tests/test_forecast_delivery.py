"""The trip outside vLLM's scheduler that grows with the requests in the engine (forecast.delivery):
fitted from a run's client TTFTs and vLLM's own queue and prefill histograms, and spent by the
simulation on each answer. The fit needs no vLLM; the simulation tests run vLLM's scheduler."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from oomkit.forecast.calibrate import calibrate
from oomkit.forecast.delivery import trip_windows
from oomkit.fsio import read_jsonl

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "decide" / "ladder-small-kv"
E0 = '{engine="0"}'


def _request(label: str, start_s: float, ttft_ms: float, latency_ms: float = 100.0) -> dict[str, Any]:
    return {
        "label": label,
        "ok": True,
        "started_unix_s": start_s,
        "ttft_ms": ttft_ms,
        "latency_ms": latency_ms,
        "output_tokens": 10,
        "prompt_tokens": 100 + int(ttft_ms),
        "cached_tokens": 0,
    }


# Window "alone": three requests one after another (no other in flight); "pair"... "four": every
# request sent at once, so each has 1 or 3 others in flight. Client TTFT means 20, 30, 50 ms.
REQUESTS = [
    *(_request("alone", 100.0 + i, 20.0) for i in range(3)),
    *(_request("pairs", 110.0 + i, 30.0) for i in (0.0, 0.01, 1.0, 1.01)),
    *(_request("four", 120.0 + i * 0.01, 50.0) for i in range(4)),
]
# vLLM's histograms: (queue ms, prefill ms) per request of each window.
HISTOGRAMS = {"alone": (0.0, 4.0), "pairs": (1.0, 5.0), "four": (2.0, 6.0)}


def _samples() -> list[dict[str, Any]]:
    """Cumulative histogram series, one sample before the windows and one at each window's end."""
    rows, queue, prefill, count = [{"label": "warm", "samples": {}}], 0.0, 0.0, 0
    for label, (queue_ms, prefill_ms) in HISTOGRAMS.items():
        n = sum(1 for r in REQUESTS if r["label"] == label)
        queue, prefill, count = queue + n * queue_ms / 1000, prefill + n * prefill_ms / 1000, count + n
        series = {"request_queue_time_seconds": queue, "request_prefill_time_seconds": prefill}
        values = {f"vllm:{k}_sum{E0}": v for k, v in series.items()}
        values |= {f"vllm:{k}_count{E0}": count for k in series}
        rows += [{"label": label, "samples": {}}, {"label": label, "samples": values}]
    rows[1]["samples"] = dict(rows[0]["samples"])  # a window's first scrape holds the one before it
    return rows


def _run(tmp_path: Path, metrics: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text((FIXTURE_RUN / "manifest.json").read_text())
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    if metrics:
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _samples()))
    return run


def test_trip_is_client_ttft_minus_vllms_queue_and_prefill(tmp_path):
    run = _run(tmp_path)
    windows = {w.label: w for w in trip_windows(run, read_jsonl(run / "requests.jsonl"))}
    assert {k: w.others_in_flight for k, w in windows.items()} == {"alone": 0, "pairs": 0.5, "four": 1.5}
    assert {k: round(w.trip_ms, 6) for k, w in windows.items()} == {"alone": 16.0, "pairs": 24.0, "four": 42.0}


def test_calibration_fits_the_trip_per_request_in_flight(tmp_path):
    model = calibrate(_run(tmp_path))
    # Theil-Sen over (0, 16), (0.5, 24), (1.5, 42): slopes 16, 18, 17.33 -> median 17.33 ms.
    assert model.delivery_s_per_running * 1000 == pytest.approx(52 / 3, rel=1e-6)
    assert "fitted on 3 windows" in model.delivery_note
    assert "delivery_s_per_running" in model.to_dict()


def test_without_vllms_histograms_the_trip_is_not_fitted_and_says_why(tmp_path):
    model = calibrate(_run(tmp_path, metrics=False))
    assert model.delivery_s_per_running == 0.0
    assert model.delivery_note.startswith("not fitted: 0 window(s)")
    fixture = calibrate(FIXTURE_RUN)  # an older run whose scraper kept no histograms
    assert fixture.delivery_s_per_running == 0.0 and fixture.delivery_note.startswith("not fitted")


def test_the_simulation_spends_the_trip_on_each_answer(tmp_path, monkeypatch):
    pytest.importorskip(
        "vllm.v1.core.sched.scheduler",
        reason="the forecast drives vLLM's scheduler: `pip install 'oomkit[forecast]'` (CI installs it)",
    )
    from test_forecast import run_forecast

    import oomkit.forecast.run as forecast_run

    base = calibrate(FIXTURE_RUN)

    def rungs(per_running_s: float) -> list[Any]:
        model = dataclasses.replace(base, delivery_s_per_running=per_running_s)
        monkeypatch.setattr(forecast_run, "calibrate", lambda *_a, **_k: model)
        return run_forecast(tmp_path, 4000, (1, 4), calibrate_run=str(FIXTURE_RUN)).rungs

    before, after = rungs(0.0), rungs(0.02)
    assert after[0].ttft_ms_p50 == pytest.approx(before[0].ttft_ms_p50)  # alone: nothing in flight
    assert before[1].ttft_ms_p50 + 15 < after[1].ttft_ms_p50 <= before[1].ttft_ms_p50 + 3 * 20 + 1
    assert after[1].itl_ms_p50 == pytest.approx(before[1].itl_ms_p50, rel=0.05)  # token gaps unchanged


def test_a_falling_prefill_line_is_fitted_flat_at_the_median(tmp_path):
    """Alone requests whose TTFT falls as prompts grow (a run without cached-token counts, where the
    long prompts were cached): the line is flat at the median, not a clamped slope with its intercept."""
    run = _run(tmp_path, metrics=False)
    falling = [dict(r) for r in REQUESTS]
    for row, (tokens, ttft_ms) in zip(falling[:3], ((100, 30.0), (200, 20.0), (300, 10.0)), strict=True):
        row.update(prompt_tokens=tokens, ttft_ms=ttft_ms)
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in falling))
    model = calibrate(run)
    assert model.per_prefill_token_ms == 0.0
    assert model.request_overhead_s * 1000 == pytest.approx(max(0.0, 20.0 - model.base_ms))
