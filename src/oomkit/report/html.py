"""The self-contained HTML report: one file, inline CSS and SVG, no script, a Content-Security-Policy
that forbids loading anything; every string from logs, servers and files is escaped. It reads top
down: the verdict and its reason, the evidence as quoted lines, the load levels with their charts,
then the comparisons, the checklists and the environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from oomkit.decide.model import DecisionDoc, ItemDoc
from oomkit.decide.render import describe
from oomkit.report import view
from oomkit.report.model import Environment, ReportDoc
from oomkit.report.svg import Chart, Mark, Series, bar_chart, line_chart
from oomkit.units import GIB, fmt_count, fmt_ms, fmt_number, fmt_pct

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
STYLE = """body{font-family:sans-serif;margin:24px auto;max-width:1180px;color:#1f2328;line-height:1.4}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}.verdict{font-size:28px;font-weight:bold}
.why{font-size:17px;margin:6px 0 12px}
.box{border:2px solid #1f6feb;border-radius:6px;padding:12px 16px;background:#f6f8ff}
.done{color:#1a7f37}.missing{color:#9a6700}.failed{color:#d1242f}.charts{display:flex;flex-wrap:wrap;gap:12px}
code,pre{font-family:monospace;font-size:12px;background:#f6f8fa;padding:2px 4px;white-space:pre-wrap;
word-break:break-all}pre.quote{border-left:3px solid #d0d7de;margin:2px 0 8px;padding:4px 8px}
.muted{color:#57606a}"""


def e(value: object) -> str:
    """Text for the page, escaped; a list or mapping in words, never as a JSON blob."""
    if isinstance(value, (dict, list, tuple)):
        value = describe(value)
    return escape("" if value is None else str(value))


def _table(head: list[str], rows: Sequence[Sequence[object]], raw_cols: tuple[int, ...] = ()) -> str:
    h = "".join(f"<th>{e(c)}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else e(c)}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f"<table><tr>{h}</tr>{body}</table>"


def _by_kind(levels: list[view.Level], key: str, scale: float = 1.0, suffix: str = "") -> list[Series]:
    by: dict[str, list[tuple[view.Level, float]]] = {}
    for lv in levels:
        if isinstance(value := lv.figures.get(key), (int, float)):
            by.setdefault(lv.kind, []).append((lv, float(value)))
    return [
        Series(
            f"{suffix}{kind} (measured)",
            [(lv.concurrency, value * scale) for lv, value in lvs],
            frozenset(lv.concurrency for lv, _ in lvs if not lv.ok),
        )
        for kind, lvs in by.items()
    ]


def _x_marks(m: view.Marks) -> list[Mark]:
    out = []
    if m.first_bad is not None:
        out.append(
            Mark(
                f"knee: {fmt_count(m.last_good)} holds, {fmt_count(m.first_bad)} fails (measured)",
                m.last_good if m.last_good is not None else m.first_bad,
                "knee",
                to=m.first_bad,
            )
        )
    if m.target is not None:
        out.append(Mark(f"target {fmt_count(m.target)} (required)", m.target))
    if m.with_reserve is not None:
        reserve = fmt_pct(m.reserve_pct, fraction=False)
        out.append(
            Mark(f"target + {reserve} reserve = {fmt_count(m.with_reserve)} (required)", m.with_reserve, "reserve")
        )
    if m.vllm_estimate is not None:
        out.append(
            Mark(
                f"vLLM's estimate at max_model_len: {fmt_count(m.vllm_estimate)} (planned)", m.vllm_estimate, "planned"
            )
        )
    return out


def _vs_concurrency(
    title: str,
    y_label: str,
    series: list[Series],
    marks: list[Mark],
    y_fmt: Callable[[float], str],
    y_max: float | None = None,
) -> str:
    """A chart against concurrency: whole dialogs on the x axis, from 0 to the last level or mark."""
    return line_chart(
        Chart(
            title,
            "concurrent dialogs",
            y_label,
            series,
            marks,
            x_integer=True,
            x_from_zero=True,
            y_max=y_max,
            y_fmt=y_fmt,
        )
    )


def _forecast_curves(dec: DecisionDoc | None, key: str, scale: float = 1.0, prefix: str = "") -> list[Series]:
    """Decide's forecast curves (view.forecast_curves) as dashed series through the measured points."""
    out = []
    for layout, rows in view.forecast_curves(dec):
        points = [
            (float(x), float(y) * scale)
            for r in rows
            if isinstance(x := r.get("concurrency"), int | float) and isinstance(y := r.get(key), int | float)
        ]
        if points:
            out.append(Series(f"{prefix}{layout} (forecast)", points, forecast=True))
    return out


def _concurrency_charts(levels: list[view.Level], m: view.Marks, dec: DecisionDoc | None = None) -> list[str]:
    marks = _x_marks(m)
    slos = [Mark("TTFT p95 SLO (required)", v, "slo_ttft", "y") for v in [m.slo_ttft_ms] if v is not None]
    slos += [Mark("e2e p95 SLO (required)", v, "slo_e2e", "y") for v in [m.slo_e2e_ms] if v is not None]
    latency = _by_kind(levels, "ttft_ms_p95", suffix="TTFT p95, ") + _by_kind(
        levels, "latency_ms_p95", suffix="e2e p95, "
    )
    return [
        _vs_concurrency(
            "Peak memory vs concurrency",
            "peak memory",
            _by_kind(levels, "peak_memory_bytes", 1 / GIB),
            marks,
            lambda v: f"{fmt_number(v)} GiB",
        ),
        _vs_concurrency(
            "KV cache usage vs concurrency",
            "max KV cache usage",
            _by_kind(levels, "max_kv_usage", 100.0) + _forecast_curves(dec, "max_kv_usage_sampled", 100.0),
            marks,
            _percent,
            100.0,
        ),
        _vs_concurrency(
            "TTFT and latency vs concurrency",
            "p95",
            latency + _forecast_curves(dec, "ttft_ms_p95", prefix="TTFT p95, "),
            marks + slos,
            fmt_ms,
        ),
    ]


def _percent(v: float) -> str:
    return f"{fmt_number(v)}%"


def _time_charts(d: ReportDoc) -> list[str]:
    runs = list(enumerate(d["timelines"], 1))
    kv = [
        Series(
            f"run {i} (measured)", [(p["t_s"], p["kv_usage"] * 100) for p in t["points"] if p["kv_usage"] is not None]
        )
        for i, t in runs
    ]
    pre = [
        Series(
            f"run {i} (measured)", [(p["t_s"], p["preemptions"]) for p in t["points"] if p["preemptions"] is not None]
        )
        for i, t in runs
    ]
    return [
        line_chart(Chart("KV cache usage over time", "seconds", "KV cache usage", kv, y_max=100.0, y_fmt=_percent)),
        line_chart(Chart("Preemptions over time (cumulative)", "seconds", "preempted sequences", pre, y_integer=True)),
    ]


def _levels(d: ReportDoc) -> str:
    levels = view.levels(d)
    m = view.marks(d, levels)
    charts = _concurrency_charts(levels, m, d["decision"]) + [
        bar_chart("Prefix-cache hit rate per mode", "hit rate", [(h["mode"], h["hit_rate"]) for h in d["hit_rates"]])
    ]
    charts += _time_charts(d)
    marks = "".join(f"<li>{e(line)}</li>" for line in view.mark_lines(m))
    runs = "; ".join(f"run {i}: {t['run']}" for i, t in enumerate(d["timelines"], 1))
    return (
        (f"<ul>{marks}</ul>" if marks else "")
        + "<p class='muted'>Solid lines and dots are measured (a hollow dot: that level fails); finely dashed "
        "lines with small dots are forecast by vLLM's own scheduler (decide's sizing: the measured server, "
        "and the layout it names), never measured; dashed lines are required by the team's numbers, dotted "
        "ones planned by vLLM; the shaded band is the knee.</p>"
        + "<div class='charts'>"
        + "".join(f"<div>{c}</div>" for c in charts)
        + "</div>"
        + (f"<p class='muted'>{e(runs)}</p>" if runs else "")
        + (_table(view.LEVEL_HEAD, view.level_rows(levels)) if levels else "<p class='muted'>no load measured</p>")
        + (_table(view.FORECAST_HEAD, forecast) if (forecast := view.forecast_rows(d["decision"])) else "")
    )


def _verdict(dec: DecisionDoc | None) -> str:
    if not dec:
        return (
            "<div class='box'><div class='verdict' id='verdict'>no decision yet</div><p class='why'>These are "
            "measurements only. Run <code>oomkit decide RUN --requirements R.yaml</code> for the verdict.</p></div>"
        )
    nums = _table(["number", "value"], [list(r) for r in view.decision_numbers(dec)])
    recs = "".join(f"<li>{e(r)}</li>" for r in dec["recommendations"])
    return (
        f"<div class='box'><div class='verdict' id='verdict'>verdict: {e(dec['verdict'])}</div>"
        f"<p class='why'>{e(dec['summary'])}</p><p><b>next</b></p><ul>{recs}</ul>{nums}"
        f"<p class='muted'>rule <code>{e(dec['rule']['id'])}</code>: {e(dec['rule']['text'])}. "
        f"Team profile: {e(dec['team']['name'])} ({e(dec['team']['asks'])}).</p></div>"
    )


def _evidence(dec: DecisionDoc | None) -> str:
    if not dec:
        return ""
    items = []
    for ev in view.evidence(dec):
        where = f"<code>{e(ev.where)}</code>" if ev.where else ""
        if ev.quoted:
            items.append(f"<li>{where}<pre class='quote'>{e(ev.text)}</pre></li>")
        else:
            items.append(f"<li>{where}{': ' if where else ''}{e(ev.text)}</li>")
    return "<h2>Evidence</h2><ul>" + ("".join(items) or "<li>none recorded</li>") + "</ul>"


def _status_rows(items: list[ItemDoc]) -> str:
    rows = [
        [
            i["title"],
            f"<span class='{e(i['status'])}'>{e(i['status'])}</span>",
            i["detail"],
            ", ".join(i.get("evidence") or []),
        ]
        for i in items
    ]
    return _table(["item", "status", "detail", "evidence"], rows, raw_cols=(1,))


def _modes(d: ReportDoc) -> str:
    if not d["modes"]:
        return "<p class='muted'>no comparison among these runs</p>"
    _, titles = view.mode_head(d)
    notes = "".join(f"<li>{e(r['mode'])}: {e(n)}</li>" for r in d["modes"] for n in r["notes"])
    return (
        "<p class='muted'>Medians of each mode's cells; the verdict in brackets is against the baseline.</p>"
        + _table(["mode", "change", "cells", *titles], view.mode_rows(d))
        + (f"<ul>{notes}</ul>" if notes else "")
        + _table(["mode", "prefix-cache hit rate", "range over the cells"], view.hit_rate_rows(d))
    )


def _environment(env: Environment) -> str:
    cmd = " ".join(env["command"])
    return (
        _table(["fact", "value"], [list(r) for r in view.environment_rows(env)])
        + f"<p><b>launch command</b></p><pre class='quote'>{e(cmd) or 'not recorded'}</pre>"
    )


def render_html(d: ReportDoc, now: str) -> str:
    dec = d.get("decision")
    title = f"oomkit report: {dec['verdict']}" if dec else "oomkit report: measurements"
    parts = [
        # The policy comes first: nothing in the document is read before it applies.
        f"<!DOCTYPE html><html lang='en'><head><meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        "<meta charset='utf-8'>",
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        _verdict(dec),
        f"<p class='muted'>from {e(d['source'])}, generated {e(now)}, request set {e(d['request_set_id'] or 'none')}"
        + (f", sampling {e(d['sampling'])}" if d.get("sampling") else "")
        + "</p>",
        _evidence(dec),
        "<h2>Load levels</h2>",
        _levels(d),
        "<h2>Comparisons (one factor at a time)</h2>",
        _modes(d),
    ]
    if dec:
        parts += [
            "<h2>Team criteria</h2>",
            _status_rows(dec["criteria"]),
            "<h2>Decision checklist</h2>",
            _status_rows(dec["checklist_items"]),
        ]
    parts += [
        "<h2>Environment and launch command</h2>",
        _environment(d["environment"]),
        "<h2>Untested scenarios</h2><ul>" + "".join(f"<li>{e(u)}</li>" for u in d["untested"]) + "</ul>",
        "<h2>Runs</h2>"
        + _table(["run", "kind", "request set"], [[r["path"], r["kind"], r["request_set_id"]] for r in d["runs"]]),
        "</body></html>",
    ]
    return "\n".join(parts)
