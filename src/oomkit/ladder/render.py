"""The ladder as text: one row per step, then the knee and the proof-of-concept checklist."""

from __future__ import annotations

from oomkit.ladder.run import LadderResult

COLUMNS = ("step", "ok", "phase", "peak mem", "max KV", "preempt", "TTFT p50", "TTFT p95", "lat p95", "errors")


def size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _num(v: float | None, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows)


def render(result: LadderResult) -> str:
    rows = [COLUMNS]
    for s in result.steps:
        rows.append(
            (
                s.name,
                "yes" if s.ok else "NO",
                s.phase,
                size(s.peak_memory_bytes),
                _num(s.max_kv_usage, "{:.0%}"),
                _num(s.preemptions),
                ms(s.ttft_ms_p50),
                ms(s.ttft_ms_p95),
                ms(s.latency_ms_p95),
                str(s.errors),
            )
        )
    lines = [table(rows), ""]
    for s in result.steps:
        lines += [f"  {s.name}: {note}" for note in s.notes]
    if result.knee:
        k = result.knee
        at = f"at concurrency {k.concurrency}" if k.concurrency else "not found"
        lines.append(f"knee: {at} ({k.reason}; last good {k.last_good})")
    poc = result.poc
    checks = (
        "short_request_stable",
        "tool_calling_valid",
        "repeat_run_identical",
        "context_limit_found",
        "peak_memory_recorded",
    )
    lines.append("poc: " + ", ".join(f"{c} {'yes' if poc.get(c) else 'no'}" for c in checks))
    if poc.get("context_limit_tokens"):
        lines.append(f"context limit: {poc['context_limit_tokens']} tokens")
    if result.failure:
        f = result.failure
        lines.append(f"stopped at {result.stopped_at}: {f.phase}: {f.reason} (from the {f.source})")
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"memory: {result.memory_source}")
    lines.append(f"run folder: {result.run_dir} (poc.json, ladder.json, requests.jsonl, metrics.jsonl)")
    return "\n".join(lines)
