"""The terminal view of a comparison: one row per mode, the verdict per metric against the baseline."""

from __future__ import annotations

from typing import Any

from oomkit.compare.verdict import METRICS

SHORT = {"better": "+", "worse": "-", "same": "=", "inconclusive": "?", "unmeasured": " "}


def _median(values: list[Any]) -> str:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return "-"
    v = vals[len(vals) // 2]
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def render(data: dict[str, Any], run_dir: str) -> str:
    lines = [
        f"experiment {data['experiment']}: {len(data['cells'])} cells, {data['repeats']} repeat(s), request set "
        f"{data['request_set_id']}, reset between cells: {', '.join(data['reset_methods']) or '-'}, "
        f"server starts {data['server_starts']} (restarts {data['restarts']})",
        "",
    ]
    keys = [m.key for m in METRICS]
    lines.append(f"{'mode':<20} {'change':<38} " + " ".join(f"{k[:12]:>12}" for k in keys))
    for mode in data["modes"]:
        cells = [c for c in data["cells"] if c["mode"] == mode["name"]]
        change = f"{mode['factor']}={mode['value']}" if mode["factor"] else "baseline"
        verdicts = {v["metric"]: v["verdict"] for v in data["comparisons"].get(mode["name"], [])}
        row = [
            f"{_median([c.get(k) for c in cells])}{SHORT.get(verdicts.get(k, ''), '') if verdicts else ''}"
            for k in keys
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
