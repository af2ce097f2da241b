"""A bench result as text."""

from __future__ import annotations

from oomkit.bench.run import BenchResult
from oomkit.ladder.render import ms, size, table


def render(r: BenchResult) -> str:
    c, s = r.client, r.server
    rate = f"{c.output_tokens_per_s:.1f}" if c.output_tokens_per_s is not None else "-"
    rows = [
        ("requests", f"{c.requests} ({c.ok} ok, {c.errors} errors{_kinds(c.errors_by_kind)})"),
        ("duration", f"{r.duration_s:.1f} s at concurrency {r.options.concurrency}"),
        ("output tokens", f"{c.output_tokens} ({rate} tokens/s)"),
        ("TTFT p50 / p95 / p99", f"{ms(c.ttft_ms_p50)} / {ms(c.ttft_ms_p95)} / {ms(c.ttft_ms_p99)}"),
        ("latency p50 / p95", f"{ms(c.latency_ms_p50)} / {ms(c.latency_ms_p95)}"),
        ("ITL p50 / p95", f"{ms(c.itl_ms_p50)} / {ms(c.itl_ms_p95)}"),
        ("agent loops ok", _agents(r)),
        ("tool calls valid", f"{c.tool_checks_valid}/{c.tool_checks}" + (f", {c.retries} retries" * bool(c.retries))),
        ("prefix cache hit rate", "-" if s.prefix_cache_hit_rate is None else f"{s.prefix_cache_hit_rate:.1%}"),
        ("preemptions", "-" if s.preemptions is None else f"{s.preemptions:g}"),
        ("max KV usage", "-" if s.max_kv_usage is None else f"{s.max_kv_usage:.0%}"),
        ("max waiting", _waiting(r)),
        ("finished (server)", ", ".join(f"{k} {v:g}" for k, v in s.requests_by_finish_reason.items()) or "-"),
        ("peak memory", f"{size(r.peak_memory_bytes)} ({r.memory_source})"),
    ]
    if r.options.clients > 1:
        where = "Ray actors" if r.options.ray is not None else "client processes"
        rows.append(("clients", f"{r.options.clients} {where}, {c.client_lost} requests lost with a client"))
    if c.slo_attainment is not None:
        goodput = f"{c.slo_met}/{c.requests} ({c.slo_attainment:.0%}), goodput {c.goodput_rps:.2f} req/s"
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
        text += f" ({a.success_share:.0%})"
    return text + (f", {a.cut} cut by the end of the run" if a.cut else "")


def _kinds(kinds: dict[str, int]) -> str:
    return (": " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))) if kinds else ""


def _waiting(r: BenchResult) -> str:
    s = r.server
    if s.max_waiting is None:
        return "-"
    by = ", ".join(f"{k} {v:g}" for k, v in s.max_waiting_by_reason.items() if v)
    return f"{s.max_waiting:g}" + (f" ({by})" if by else "")
