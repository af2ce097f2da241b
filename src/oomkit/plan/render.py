"""Human output for plans, comparisons and calibrations: a small per-GPU table, the verdicts in
words, then the levers. JSON output is `Plan.to_dict()` as is."""

from __future__ import annotations

from oomkit.plan.calibrate import Calibration
from oomkit.plan.compare import CompareRow
from oomkit.plan.core import Plan
from oomkit.plan.defaults import defaults_text
from oomkit.plan.levers import Lever

ROWS = (
    ("capacity_gib", "device memory"),
    ("budget_gib", "vLLM budget"),
    ("weights_gib", "weights"),
    ("activation_gib", "activation peak"),
    ("cudagraph_gib", "CUDA graphs"),
    ("other_gib", "other (non-torch)"),
    ("kv_cache_gib", "KV cache"),
)


def _yes(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "NO")


def plan_text(p: Plan) -> str:
    g, s, c = p.per_gpu_gib(), p.settings, p.capacity
    head = (
        f"{p.model.name} on {p.layout.gpus} x {p.gpu.name} ({p.layout.label}), vLLM "
        f"{'.'.join(map(str, p.behaviour.version))}, max_model_len {s['max_model_len']:,}, "
        f"kv {s['kv_cache_dtype']}, gmu {s['gpu_memory_utilization']}"
    )
    lines = [head, "", "per GPU                 GiB"]
    lines += [f"  {label:<20}{g[key]:>8.2f}" for key, label in ROWS]
    state = f", state {p.kv.state_bytes_per_sequence:,} B/sequence" if p.kv.state_bytes_per_sequence else ""
    lines += [
        "",
        f"KV: {p.kv.kv_bytes_per_token:,} B/token{state}; block {p.kv.block_size} tokens, "
        f"{len(p.kv.groups)} group(s), {c.num_blocks:,} blocks",
        f"{p.gpu.platform.upper() if p.gpu.platform == 'cpu' else 'GPU'} KV cache size: {c.kv_cache_tokens:,} tokens, "
        f"Maximum concurrency for {s['max_model_len']:,} tokens per request: {c.max_concurrency:.2f}x",
        "",
    ]
    lines.append(f"loads (weights + runtime within budget): {_yes(p.fits_load)}")
    one = p.fits_load and c.fits_one_request
    extra = ""
    if not one and c.estimated_max_model_len:
        extra = f" (vLLM's estimated maximum model length: {c.estimated_max_model_len:,})"
    lines.append(f"one request of max_model_len fits the KV pool: {_yes(one)}{extra}")
    if p.fits_target is not None:
        r = p.request
        lines.append(
            f"target {r.concurrency or 1} x {r.context or s['max_model_len']:,} tokens: {_yes(p.fits_target)} "
            f"(needs {p.target_blocks:,} blocks per engine, has {max(0, c.num_blocks - 1):,})"
        )
    lines.append("verdict: " + verdict(p))
    if p.defaults:
        lines += ["", "defaults these figures rest on (vLLM's choice here; pin each with its flag)"]
        lines += defaults_text(p.defaults)
    if p.levers:
        lines += ["", "levers"]
        lines += ["  " + lever_text(x) for x in p.levers]
    notes = [n for n in p.notes if not n.startswith("capacity:")]
    if notes:
        lines += ["", "notes"] + [f"  - {n}" for n in notes]
    overridden = [a for a in p.assumptions.values() if a.overridden]
    lines += [
        "",
        "estimates: "
        + ", ".join(
            f"{a.name}={a.value:g}"
            for a in p.assumptions.values()
            if a.name in ("activation_gib", "cudagraph_gib", "other_gib")
        )
        + (f" (overridden: {', '.join(a.name for a in overridden)})" if overridden else "")
        + "; see --json for all assumptions",
    ]
    return "\n".join(lines)


def verdict(p: Plan) -> str:
    if not p.fits_load:
        return "cannot load: weights plus runtime do not fit this topology -- change the layout or add GPUs"
    if not p.capacity.fits_one_request:
        return "loads, but one max-length request does not fit -- lower max_model_len, use fp8 KV or DCP, or add GPUs"
    if p.fits_target is False:
        return "loads, but cannot serve the target -- tune context, concurrency or cache, or add capacity"
    return "fits" + ("" if p.fits_target is None else " the target")


def lever_text(x: Lever) -> str:
    if not x.applies or x.before is None or x.after is None:
        return f"{x.lever}: does not apply -- {x.why}"
    b, a = x.before, x.after
    text = (
        f"{x.lever} ({x.flag}): KV tokens {b.kv_cache_tokens:,} -> {a.kv_cache_tokens:,}, "
        f"concurrency {b.max_concurrency}x -> {a.max_concurrency}x"
    )
    if a.fits_load != b.fits_load:
        text += f", loads: {_yes(a.fits_load)}"
    if a.fits_one_request != b.fits_one_request:
        text += f", one request fits: {_yes(a.fits_one_request)}"
    if a.fits_target != b.fits_target and a.fits_target is not None:
        text += f", target fits: {_yes(a.fits_target)}"
    if x.why:
        text += f" ({x.why})"
    return text


def compare_text(rows: list[CompareRow]) -> str:
    out = [
        f"{'layout':<34}{'GPUs':>5}{'load':>6}{'1 req':>7}{'target':>8}{'weights':>9}{'KV GiB':>8}"
        f"{'KV tokens':>12}{'conc/eng':>10}{'engines':>8}"
    ]
    for r in rows:
        out.append(
            f"{r['label']:<34}{r['gpus']:>5}{_yes(r['fits_load']):>6}{_yes(r['fits_one_request']):>7}"
            f"{_yes(r['fits_target']):>8}{r['weights_gib']:>9.1f}{r['kv_cache_gib']:>8.1f}"
            f"{r['kv_cache_tokens']:>12,}{r['max_concurrency']:>10.2f}{r['engines']:>8}"
        )
    return "\n".join(out)


def calibration_text(cal: Calibration) -> str:
    out = [
        f"calibration from {cal.log}",
        f"{'figure':<28}{'printed':>14}{'predicted':>14}{'error':>9}{'calibrated':>14}",
    ]
    for row in cal.rows:
        err = "" if row.error_pct is None else f"{row.error_pct:+.1f}%"
        out.append(
            f"{row.figure:<28}{_fmt(row.printed):>14}{_fmt(row.predicted):>14}{err:>9}{_fmt(row.calibrated):>14}"
        )
    if cal.assume:
        out.append("fitted: " + " ".join(f"--assume {k}={v}" for k, v in cal.assume.items()))
    out += [f"  - {n}" for n in cal.notes]
    return "\n".join(out)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.2f}"
    return f"{x:,}" if isinstance(x, int) else str(x)
