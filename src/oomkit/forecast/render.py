"""A forecast as text: the ladder's rung table, labelled forecast on every screen."""

from __future__ import annotations

from oomkit.forecast.calibrate import Calibrated
from oomkit.forecast.result import Forecast, LayoutForecast, RungForecast
from oomkit.forecast.steptime import (
    HBM_EFFICIENCY,
    MFU,
    STEP_OVERHEAD_MS,
    Roofline,
    StepTimeModel,
)
from oomkit.loadrun.table import table
from oomkit.units import fmt_count, fmt_ms, fmt_number, fmt_pct, fmt_s

KV_LEGEND = (
    "KV peak: vLLM's KV usage after every step; KV @1s: the peak /metrics scraped once a second would show "
    "(compare a ladder's max KV with this one)"
)
COLUMNS = (
    "conc",
    "verdict",
    "regime",
    "requests",
    "preempt",
    "KV peak",
    "KV @1s",
    "waiting",
    "prefix hit",
    "TTFT p50",
    "TTFT p95",
    "ITL p50",
    "ITL p95",
    "lat p95",
    "tokens/s",
)


def render(f: Forecast) -> str:
    head = (
        f"FORECAST - nothing below was measured: vLLM {f.vllm['version']}'s own scheduler on a virtual clock, "
        f"step time {f.step_time_model}"
    )
    t = f.traffic
    lines = [head, f"traffic: {t.name} ({t.source}), {t.sessions} sessions x {t.steps_per_session} steps"]
    several = len(f.layouts) > 1
    for lay in f.layouts:
        lines += ["", *_layout(lay)]
        if several and lay.step_time and f.step_time_model == "roofline":  # a roofline differs per layout
            lines.append(f"step time: {_step_time(lay.step_time)}")
    if not several or f.step_time_model != "roofline":
        lines += ["", f"step time: {_step_time(f.step_time)}"]
    lines += [f"note: {n}" for n in f.notes]
    steps = sum(r.steps for lay in f.layouts for r in lay.rungs)
    rungs = sum(len(lay.rungs) for lay in f.layouts)
    lines.append(f"forecast wall time: {fmt_s(f.wall_s)} ({rungs} rungs, {steps:,} scheduler steps)")
    return "\n".join(lines)


def _layout(lay: LayoutForecast) -> list[str]:
    p = lay.plan
    if lay.error:
        what = "does not load" if lay.knee.reason == "does_not_load" else "its forecast failed"
        return [f"layout {lay.layout}: {p['model']} on {p['gpus']} x {p['gpu']}: {what}: {lay.error}"]
    pool = (
        f"KV pool {p['num_blocks']:,} blocks x {p['block_size']} tokens = {p['kv_cache_tokens']:,} tokens "
        f"(vLLM's own count: {p['vllm_kv_cache_tokens']:,})"
    )
    lines = [
        f"layout {lay.layout}: {p['model']} on {p['gpus']} x {p['gpu']}; {pool}",
        f"KV groups: {'; '.join(p['kv_groups'])}",
    ]
    rows: list[tuple[str, ...]] = [COLUMNS]
    for r in lay.rungs:
        rows.append(
            (
                str(r.concurrency),
                r.verdict,
                r.regime,
                str(r.requests) + (f" ({r.errors} err)" if r.errors else ""),
                fmt_count(r.preemptions),
                fmt_pct(r.max_kv_usage, decimals=0),
                fmt_pct(r.max_kv_usage_sampled, decimals=0),
                str(r.waiting_max),
                fmt_pct(r.prefix_hit_rate),
                fmt_ms(r.ttft_ms_p50),
                fmt_ms(r.ttft_ms_p95),
                fmt_ms(r.itl_ms_p50),
                fmt_ms(r.itl_ms_p95),
                fmt_ms(r.latency_ms_p95),
                fmt_number(r.output_tokens_per_s, 0),
            )
        )
    lines += [table(rows), KV_LEGEND]
    lines += [line for r in lay.rungs if r.minutes for line in _minutes(r)]
    k = lay.knee
    at = f"at concurrency {k.concurrency}" if k.concurrency else "not found"
    lines.append(f"knee (forecast): {at} ({k.reason}; last good {fmt_count(k.last_good)})")
    lines += [f"  c{r.concurrency}: {n}" for r in lay.rungs for n in r.notes]
    lines += [f"note: {n}" for n in lay.notes]
    return lines


MINUTE_COLUMNS = ("minute", "ended", "preempt", "KV peak", "waiting", "prefix hit", "TTFT p50", "TTFT p95", "lat p95")


def _minutes(r: RungForecast) -> list[str]:
    """The window a minute at a time: requests that ended in it, and the steps that ran in it."""
    rows: list[tuple[str, ...]] = [MINUTE_COLUMNS]
    for m in r.minutes:
        rows.append(
            (
                str(m.minute + 1),
                str(m.requests) + (f" ({m.errors} err)" if m.errors else ""),
                fmt_count(m.preemptions),
                fmt_pct(m.max_kv_usage, decimals=0),
                str(m.waiting_max),
                fmt_pct(m.prefix_hit_rate),
                fmt_ms(m.ttft_ms_p50),
                fmt_ms(m.ttft_ms_p95),
                fmt_ms(m.latency_ms_p95),
            )
        )
    return [f"per minute of the window (forecast), {r.concurrency} sessions:", table(rows)]


def _step_time(model: StepTimeModel) -> str:
    if isinstance(model, Calibrated):
        return (
            f"calibrated on {model.source}: {fmt_number(model.base_ms)} ms + {fmt_number(model.per_seq_ms)} ms per "
            f"decode sequence + {fmt_number(model.per_prefill_token_ms, 3)} ms per prefill token; "
            f"{fmt_ms(model.request_overhead_s * 1000)} per request outside the engine"
            + (
                f" + {fmt_number(model.delivery_s_per_running * 1000)} ms per request already in it"
                if model.delivery_s_per_running
                else f" ({model.delivery_note})"
                if model.delivery_note
                else ""
            )
            + "".join(f"\nwarning: {w}" for w in model.warnings)
        )
    if not isinstance(model, Roofline):
        return model.name
    r = model
    return (
        f"roofline: HBM {fmt_number(r.hbm_bytes_per_s / 1e9, 0)} GB/s and {fmt_number(r.flops_per_s / 1e12, 0)} "
        f"TFLOP/s effective (efficiency {HBM_EFFICIENCY}, MFU {MFU}), "
        f"{STEP_OVERHEAD_MS} ms per step; weights {fmt_number(r.dense_weight_bytes / 2**30, 1)} GiB dense + "
        f"{fmt_number(r.expert_weight_bytes / 2**30, 1)} GiB experts per GPU"
    )
