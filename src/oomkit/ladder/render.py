"""The ladder as text: one row per step, then the knee and the proof-of-concept checklist."""

from __future__ import annotations

from oomkit.ladder.run import LadderResult
from oomkit.loadrun.table import table
from oomkit.units import fmt_count, fmt_ms, fmt_pct, fmt_size, fmt_tokens

COLUMNS = ("step", "ok", "phase", "peak mem", "max KV", "preempt", "TTFT p50", "TTFT p95", "lat p95", "errors")
POC_CHECKS = (
    "short_request_stable",
    "tool_calling_valid",
    "repeat_run_identical",
    "context_limit_found",
    "peak_memory_recorded",
)


def render(result: LadderResult) -> str:
    rows = [COLUMNS]
    for s in result.steps:
        rows.append(
            (
                s.name,
                "yes" if s.ok else "NO",
                s.phase,
                fmt_size(s.peak_memory_bytes),
                fmt_pct(s.max_kv_usage, decimals=0),
                fmt_count(s.preemptions),
                fmt_ms(s.ttft_ms_p50),
                fmt_ms(s.ttft_ms_p95),
                fmt_ms(s.latency_ms_p95),
                str(s.errors),
            )
        )
    lines = [table(rows), ""]
    for s in result.steps:
        lines += [f"  {s.name}: {note}" for note in s.notes]
    if result.knee:
        k = result.knee
        at = f"at concurrency {fmt_count(k.concurrency)}" if k.concurrency else "not found"
        lines.append(f"knee: {at} ({k.reason}; last good {fmt_count(k.last_good)})")
    poc = result.poc
    lines.append("poc: " + ", ".join(f"{c} {'yes' if poc.get(c) else 'no'}" for c in POC_CHECKS))
    if poc.get("context_limit_tokens"):
        lines.append(f"context limit: {fmt_tokens(poc['context_limit_tokens'])}")
    if result.failure:
        f = result.failure
        lines.append(f"stopped at {result.stopped_at}: {f.phase}: {f.reason} (from the {f.source})")
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"memory: {result.memory_source}")
    lines.append(f"run folder: {result.run_dir} (poc.json, ladder.json, requests.jsonl, metrics.jsonl)")
    return "\n".join(lines)
