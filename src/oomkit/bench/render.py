"""A bench result as text."""

from __future__ import annotations

from oomkit.bench.run import BenchResult
from oomkit.loadrun.table import table
from oomkit.units import NONE, fmt_count, fmt_ms, fmt_number, fmt_pct, fmt_rate, fmt_size


def render(r: BenchResult) -> str:
    c, s = r.client, r.server
    rows = [
        ("requests", f"{c.requests} ({c.ok} ok, {c.errors} errors{_kinds(c.errors_by_kind)})"),
        ("duration", f"{fmt_number(r.duration_s, 1)} s at concurrency {r.options.concurrency}"),
        ("output tokens", f"{c.output_tokens} ({fmt_rate(c.output_tokens_per_s, 'tokens')})"),
        ("TTFT p50 / p95 / p99", f"{fmt_ms(c.ttft_ms_p50)} / {fmt_ms(c.ttft_ms_p95)} / {fmt_ms(c.ttft_ms_p99)}"),
        ("latency p50 / p95", f"{fmt_ms(c.latency_ms_p50)} / {fmt_ms(c.latency_ms_p95)}"),
        ("ITL p50 / p95", f"{fmt_ms(c.itl_ms_p50)} / {fmt_ms(c.itl_ms_p95)}"),
        ("agent loops ok", _agents(r)),
        ("tool calls valid", f"{c.tool_checks_valid}/{c.tool_checks}" + (f", {c.retries} retries" * bool(c.retries))),
        ("prefix cache hit rate", fmt_pct(s.prefix_cache_hit_rate)),
        ("preemptions", fmt_count(s.preemptions)),
        ("max KV usage", fmt_pct(s.max_kv_usage, decimals=0)),
        ("max waiting", _waiting(r)),
        ("finished (server)", ", ".join(f"{k} {fmt_count(v)}" for k, v in s.requests_by_finish_reason.items()) or NONE),
        ("peak memory", f"{fmt_size(r.peak_memory_bytes)} ({r.memory_source})"),
    ]
    if r.options.clients > 1:
        where = "Ray actors" if r.options.ray is not None else "client processes"
        rows.append(("clients", f"{r.options.clients} {where}, {c.client_lost} requests lost with a client"))
    if c.slo_attainment is not None:
        goodput = (
            f"{c.slo_met}/{c.requests} ({fmt_pct(c.slo_attainment, decimals=0)}), goodput {fmt_rate(c.goodput_rps)}"
        )
        rows.append(("SLOs met", goodput))
    lines = [table(rows)]
    if r.failure:
        f = r.failure
        lines.append(f"first failure: {f.kind}: {f.reason} ({f.phase}, from the {f.source})")
    lines += [f"note: {n}" for n in r.notes]
    lines.append(f"run folder: {r.run_dir} (bench.json, requests.jsonl, metrics.jsonl)")
    return "\n".join(lines)


def _agents(r: BenchResult) -> str:
    a = r.agents
    text = f"{a.succeeded}/{a.succeeded + a.failed}"
    if a.success_share is not None:
        text += f" ({fmt_pct(a.success_share, decimals=0)})"
    return text + (f", {a.cut} cut by the end of the run" if a.cut else "")


def _kinds(kinds: dict[str, int]) -> str:
    return (": " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))) if kinds else ""


def _waiting(r: BenchResult) -> str:
    s = r.server
    if s.max_waiting is None:
        return NONE
    by = ", ".join(f"{k} {fmt_count(v)}" for k, v in s.max_waiting_by_reason.items() if v)
    return fmt_count(s.max_waiting) + (f" ({by})" if by else "")
