"""The terminal view of a comparison: one row per mode, the verdict per metric against the baseline."""

from __future__ import annotations

from collections.abc import Sequence

from oomkit.compare.document import CompareDoc, Setting
from oomkit.compare.verdict import METRICS
from oomkit.units import NONE, fmt_number, fmt_value

SHORT = {"better": "+", "worse": "-", "same": "=", "inconclusive": "?", "unmeasured": " "}
HEAD = {
    "peak_memory_bytes": "peak mem",
    "max_kv_usage": "max KV",
    "prefix_cache_hit_rate": "hit rate",
    "ttft_ms_p95": "TTFT p95",
    "latency_ms_p95": "e2e p95",
    "session_ms_p95": "loop p95",
    "preemptions": "preempt",
    "errors": "errors",
    "agent_success_share": "agents ok",
}


def setting(value: Setting) -> str:
    """A compared setting as written (True, hermes, 2), a float rounded."""
    return fmt_number(value) if isinstance(value, float) else str(value)


def _median(values: Sequence[float | None], unit: str) -> str:
    """The middle value (the upper one of an even count), in the metric's unit."""
    vals = sorted(v for v in values if v is not None)
    return fmt_value(vals[len(vals) // 2], unit) if vals else NONE


def render(data: CompareDoc, run_dir: str) -> str:
    lines = [
        f"experiment {data['experiment']}: {len(data['cells'])} cells, {data['repeats']} repeat(s), request set "
        f"{data['request_set_id']}, reset between cells: {', '.join(data['reset_methods']) or '-'}, "
        f"server starts {data['server_starts']} (restarts {data['restarts']})",
        "",
    ]
    lines.append(f"{'mode':<20} {'change':<38} " + " ".join(f"{HEAD.get(m.key, m.key)[:12]:>12}" for m in METRICS))
    for mode in data["modes"]:
        cells = [c for c in data["cells"] if c["mode"] == mode["name"]]
        change = f"{mode['factor']}={setting(mode['value'])}" if mode["factor"] else "baseline"
        verdicts = {v["metric"]: v["verdict"] for v in data["comparisons"].get(mode["name"], [])}
        row = [
            f"{_median([c.get(m.key) for c in cells], m.unit)}{SHORT.get(verdicts.get(m.key, ''), '') if verdicts else ''}"
            for m in METRICS
        ]
        lines.append(f"{mode['name']:<20} {change[:38]:<38} " + " ".join(f"{r:>12}" for r in row))
    for name, fail in data.get("launch_failures", {}).items():
        lines.append(f"{name}: did not start: {fail.get('phase')}: {fail.get('summary')}")
    for name, death in data.get("server_deaths", {}).items():
        lines.append(
            f"{name}: the server died during cell {death.get('cell')}: {death.get('phase')}: {death.get('reason')}"
        )
    lines += ["", "medians; + better, - worse, = same, ? inconclusive (repeat ranges overlap) vs the baseline"]
    lines += [f"note: {n}" for n in data["notes"]] + [
        f"note ({m['name']}): {n}" for m in data["modes"] for n in m["notes"]
    ]
    lines.append(f"folder: {run_dir}")
    return "\n".join(lines)
