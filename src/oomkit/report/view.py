"""What every report format shows, worked out once from the report data: the measured load levels
(every ladder rung and compared cell the verdict weighed), the knee, the planned and required marks
(target, peak reserve, vLLM's own estimate, SLOs), and the tables' rows as text with units."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from oomkit.compare.document import Setting
from oomkit.decide.documents import number
from oomkit.decide.model import DecisionDoc
from oomkit.decide.render import EvidenceLine, describe, evidence_line, number_rows
from oomkit.fsio import json_object
from oomkit.report.model import Environment, ReportDoc
from oomkit.serial import JsonObject
from oomkit.units import NONE, fmt_count, fmt_figure, fmt_gib, fmt_ms, fmt_number, fmt_pct, fmt_s, fmt_value

KINDS = {"ladder.json": "ladder rungs", "compare.json": "compared cells"}
ORDER = {name: i for i, name in enumerate(KINDS.values())}
METRIC_LABELS = {
    "peak_memory_bytes": "peak memory",
    "max_kv_usage": "KV cache usage (max)",
    "prefix_cache_hit_rate": "prefix-cache hit rate",
    "ttft_ms_p95": "TTFT p95",
    "latency_ms_p95": "response time p95",
    "session_ms_p95": "agent loop time p95",
    "preemptions": "preempted sequences",
    "errors": "errors",
    "agent_success_share": "agent loops succeeded",
}
LEVEL_HEAD = [
    "concurrency",
    "holds",
    "why",
    "peak memory",
    "max KV usage",
    "preemptions",
    "TTFT p95",
    "e2e p95",
    "measured in",
]


@dataclass(frozen=True)
class Level:
    """One measured load level: a ladder rung, a compared cell or an imported run."""

    concurrency: float
    ok: bool
    why: str
    source: str
    figures: JsonObject

    @property
    def kind(self) -> str:
        return next((name for file, name in KINDS.items() if file in self.source), "imported runs")


@dataclass(frozen=True)
class Marks:
    """Where the charts draw lines: the knee (measured) and the planned or required values."""

    last_good: float | None
    """The highest level that holds below the first that fails."""
    first_bad: float | None
    target: float | None
    with_reserve: float | None
    reserve_pct: float | None
    vllm_estimate: float | None
    """vLLM's own maximum concurrency for requests of max_model_len, from its start-up log: planned."""
    slo_ttft_ms: float | None
    slo_e2e_ms: float | None


def levels(d: ReportDoc) -> list[Level]:
    """The levels the verdict weighed (the decision's capacity points), else the run's load points."""
    dec = d.get("decision")
    cap = dec.get("capacity") if dec else None
    points = (cap.get("points") if cap else None) or d["load_points"]
    return [
        Level(float(p["concurrency"]), bool(p["ok"]), str(p.get("why") or ""), str(p["source"]), p.get("figures") or {})
        for p in points
    ]


def knee(levels_: list[Level]) -> tuple[float | None, float | None]:
    """(last level that holds, first that fails), as oomkit.decide.facts.Facts.capacity works it out."""
    bad = [lv.concurrency for lv in levels_ if not lv.ok]
    first_bad = min(bad) if bad else None
    good = [lv.concurrency for lv in levels_ if lv.ok and (first_bad is None or lv.concurrency < first_bad)]
    return (max(good) if good else None), first_bad


def marks(d: ReportDoc, levels_: list[Level]) -> Marks:
    dec = d.get("decision")
    cap = dec.get("capacity") if dec else None
    nums = (dec.get("numbers") if dec else None) or {}
    last_good, first_bad = (cap.get("last_good"), cap.get("first_bad")) if cap and cap.get("points") else knee(levels_)
    req = json_object(dec.get("requirements") if dec else None)
    target = nums.get("target_concurrency", number(req.get("concurrent_dialogs")))
    reserve = nums.get("reserve_pct", number(req.get("peak_reserve_pct")))
    with_reserve = nums.get("target_with_reserve")
    if with_reserve is None and target is not None and reserve is not None:  # as Requirements.target_with_reserve
        with_reserve = target * (1 + reserve / 100)
    slo = json_object(req.get("slo"))
    estimate = number((d["environment"].get("figures") or {}).get("max_concurrency"))
    return Marks(
        last_good,
        first_bad,
        target,
        with_reserve,
        reserve,
        estimate,
        number(slo.get("ttft_p95_ms")),
        number(slo.get("e2e_p95_ms")),
    )


def mark_lines(m: Marks) -> list[str]:
    """The marks in words, for formats without charts and for the charts' captions."""
    out = []
    if m.first_bad is not None:
        out.append(f"knee: {fmt_count(m.last_good)} holds, {fmt_count(m.first_bad)} fails (measured)")
    elif m.last_good is not None:
        out.append(f"no knee: every level held, up to {fmt_count(m.last_good)} (measured)")
    if m.target is not None:
        out.append(f"target: {fmt_count(m.target)} concurrent dialogs (required)")
    if m.with_reserve is not None:
        out.append(
            f"target with the {fmt_pct(m.reserve_pct, fraction=False)} peak reserve: "
            f"{fmt_count(m.with_reserve)} (required)"
        )
    if m.vllm_estimate is not None:
        out.append(f"vLLM's estimate for requests of max_model_len: {fmt_count(m.vllm_estimate)} (planned)")
    return out


def level_rows(levels_: list[Level]) -> list[list[str]]:
    return [
        [
            fmt_count(lv.concurrency),
            "yes" if lv.ok else "no",
            lv.why,
            fmt_gib(number(lv.figures.get("peak_memory_bytes"))),
            fmt_pct(number(lv.figures.get("max_kv_usage"))),
            fmt_count(number(lv.figures.get("preemptions"))),
            fmt_ms(number(lv.figures.get("ttft_ms_p95"))),
            fmt_ms(number(lv.figures.get("latency_ms_p95"))),
            lv.source,
        ]
        for lv in sorted(levels_, key=lambda lv: (ORDER.get(lv.kind, len(ORDER)), lv.concurrency))
    ]


def setting(value: Setting) -> str:
    """A compared setting as written (True, hermes, 2), a float rounded."""
    return fmt_number(value) if isinstance(value, float) else str(value)


def _median(values: Sequence[object]) -> float | None:
    vals = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def mode_head(d: ReportDoc) -> tuple[list[str], list[str]]:
    """The metric keys the comparison judged, and their column titles."""
    order = list(METRIC_LABELS)
    keys = sorted(
        {m for row in d["modes"] for m in row["verdicts"]},
        key=lambda k: (order.index(k) if k in order else len(order), k),
    )
    return keys, [METRIC_LABELS.get(k, k.replace("_", " ")) for k in keys]


def mode_rows(d: ReportDoc) -> list[list[str]]:
    """Per compared mode: its change, cells, and per metric the median with its unit and the verdict."""
    keys, _ = mode_head(d)
    rows = []
    for r in d["modes"]:
        change = f"{r['factor']} = {setting(r['value'])}" if r["factor"] else "baseline"
        cells = []
        for k in keys:
            value = fmt_figure(k, _median(r["figures"].get(k) or []))
            verdict = r["verdicts"].get(k, "")
            cells.append(f"{value} ({verdict})" if verdict and value != NONE else verdict or value)
        rows.append([r["mode"], change, str(r["cells"]), *cells])
    return rows


def hit_rate_rows(d: ReportDoc) -> list[list[str]]:
    return [[h["mode"], fmt_pct(h["hit_rate"]), f"{fmt_pct(h['min'])} to {fmt_pct(h['max'])}"] for h in d["hit_rates"]]


def environment_rows(env: Environment) -> list[tuple[str, str]]:
    cpu = f"{env['cpu']} ({env['cpus']} CPUs)" if env.get("cpu") else fmt_value(env.get("cpus"))
    return [
        ("vLLM", fmt_value(env.get("vllm"))),
        ("torch", fmt_value(env.get("torch"))),
        ("build", fmt_value(env.get("build"))),
        ("driver", fmt_value(env.get("driver"))),
        ("GPUs", ", ".join(env.get("gpus") or []) or fmt_value(env.get("gpu_note"))),
        ("CPU", cpu),
        ("RAM", "-" if env.get("ram_gib") is None else f"{env['ram_gib']:.1f} GiB"),
        ("profile", fmt_value(env.get("profile_file"))),
        ("ready after", fmt_s(env.get("ready_s"))),
        ("KV figures from the log", describe({k: v for k, v in (env.get("figures") or {}).items()}) or "-"),
    ]


def decision_numbers(dec: DecisionDoc) -> list[tuple[str, str]]:
    return number_rows(dec.get("numbers") or {})


def evidence(dec: DecisionDoc, limit: int = 8) -> list[EvidenceLine]:
    return [evidence_line(e) if isinstance(e, dict) else EvidenceLine("", str(e), False) for e in dec["evidence"]][
        :limit
    ]


FORECAST_HEAD = ["layout (forecast)", "concurrency", "verdict", "KV @1s", "TTFT p95", "e2e p95", "preemptions"]


def forecast_curves(dec: DecisionDoc | None) -> list[tuple[str, list[JsonObject]]]:
    """Decide's forecast curves to show beside the measured levels: its first candidate (the measured
    server itself, or the smallest layout) and the layout it names; none when it did not forecast."""
    sizing = dec["forecast_sizing"] if dec else {}
    listed = sizing.get("candidates")
    candidates = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    chosen = sizing.get("layout")
    shown = candidates[:1] + [c for c in candidates[1:] if c.get("layout") == chosen]
    out = []
    for cand in shown:
        curve = cand.get("curve")
        rows = [r for r in curve if isinstance(r, dict)] if isinstance(curve, list) else []
        if rows:
            out.append((str(cand.get("layout")), rows))
    return out


def forecast_rows(dec: DecisionDoc | None) -> list[list[str]]:
    return [
        [
            layout,
            fmt_count(number(r.get("concurrency"))),
            str(r.get("verdict", NONE)),
            fmt_pct(number(r.get("max_kv_usage_sampled"))),
            fmt_ms(number(r.get("ttft_ms_p95"))),
            fmt_ms(number(r.get("latency_ms_p95"))),
            fmt_count(number(r.get("preemptions"))),
        ]
        for layout, rows in forecast_curves(dec)
        for r in rows
    ]
