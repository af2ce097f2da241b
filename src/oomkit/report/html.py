"""The self-contained HTML report: one file, inline CSS and SVG, no script, a Content-Security-Policy
that forbids loading anything; every string from logs, servers and files is escaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from oomkit.report.svg import bar_chart, line_chart

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
STYLE = """body{font-family:sans-serif;margin:24px auto;max-width:1180px;color:#1f2328;line-height:1.4}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}.verdict{font-size:28px;font-weight:bold}
.box{border:2px solid #1f6feb;border-radius:6px;padding:12px 16px;background:#f6f8ff}
.done{color:#1a7f37}.missing{color:#9a6700}.failed{color:#d1242f}.charts{display:flex;flex-wrap:wrap;gap:12px}
code,pre{font-family:monospace;font-size:12px;background:#f6f8fa;padding:2px 4px;white-space:pre-wrap;
word-break:break-all}.muted{color:#57606a}"""


def e(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, default=str)
    return escape("" if value is None else str(value))


def _table(head: list[str], rows: list[list[Any]], raw_cols: tuple[int, ...] = ()) -> str:
    h = "".join(f"<th>{e(c)}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else e(c)}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f"<table><tr>{h}</tr>{body}</table>"


def _kind(source: str) -> str:
    return "ladder" if "ladder.json" in source else "compare" if "compare.json" in source else "import"


def _series(points: list[dict[str, Any]], key: str, scale: float = 1.0) -> list[tuple[str, list[tuple[float, float]]]]:
    by: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        v = p["figures"].get(key)
        if v is not None:
            by.setdefault(_kind(p["source"]), []).append((float(p["concurrency"]), float(v) * scale))
    return [(k, v) for k, v in by.items()]


def _charts(d: dict[str, Any]) -> str:
    pts = d["load_points"]
    lat = [(f"TTFT p95 ({k})", s) for k, s in _series(pts, "ttft_ms_p95")] + [
        (f"e2e p95 ({k})", s) for k, s in _series(pts, "latency_ms_p95")
    ]
    kv_time = [
        (f"run {i + 1}", [(p["t_s"], p["kv_usage"]) for p in t["points"] if p["kv_usage"] is not None])
        for i, t in enumerate(d["timelines"])
    ]
    pre_time = [
        (f"run {i + 1}", [(p["t_s"], p["preemptions"]) for p in t["points"] if p["preemptions"] is not None])
        for i, t in enumerate(d["timelines"])
    ]
    charts = [
        line_chart("Peak memory vs concurrency", "concurrent dialogs", "bytes", _series(pts, "peak_memory_bytes")),
        line_chart(
            "KV cache usage vs concurrency", "concurrent dialogs", "max KV usage (0-1)", _series(pts, "max_kv_usage")
        ),
        line_chart("TTFT and latency vs concurrency", "concurrent dialogs", "ms (p95)", lat),
        bar_chart("Prefix-cache hit rate per mode", "hit rate", [(h["mode"], h["hit_rate"]) for h in d["hit_rates"]]),
        line_chart("KV cache usage over time", "seconds", "KV usage (0-1)", kv_time),
        line_chart("Preemptions over time (cumulative)", "seconds", "preempted sequences", pre_time),
    ]
    legend = (
        "<p class='muted'>" + e("; ".join(f"run {i + 1}: {t['run']}" for i, t in enumerate(d["timelines"]))) + "</p>"
    )
    return "<div class='charts'>" + "".join(f"<div>{c}</div>" for c in charts) + "</div>" + legend


def _verdict(dec: dict[str, Any] | None) -> str:
    if not dec:
        return (
            "<div class='box'><div class='verdict'>no decision yet</div><p>These are measurements only. Run "
            "<code>oomkit decide RUN --requirements R.yaml</code> for the verdict.</p></div>"
        )
    nums = _table(["number", "value"], [[k, v] for k, v in dec["numbers"].items()])
    recs = "".join(f"<li>{e(r)}</li>" for r in dec["recommendations"])
    ev = "".join(f"<li><code>{e(x)}</code></li>" for x in dec["evidence"][:8])
    return (
        f"<div class='box'><div class='verdict' id='verdict'>verdict: {e(dec['verdict'])}</div>"
        f"<p><b>rule</b> <code>{e(dec['rule']['id'])}</code>: {e(dec['rule']['text'])}</p>"
        f"<p>{e(dec['summary'])}</p><p><b>team profile</b>: {e(dec['team']['name'])} ({e(dec['team']['asks'])})</p>"
        f"{nums}<p><b>next</b></p><ul>{recs}</ul><p><b>evidence</b></p><ul>{ev}</ul></div>"
    )


def _status_rows(items: list[dict[str, Any]]) -> str:
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


def _modes(d: dict[str, Any]) -> str:
    if not d["modes"]:
        return "<p class='muted'>no comparison among these runs</p>"
    metrics = sorted({m for row in d["modes"] for m in row["verdicts"]})
    rows = [
        [
            r["mode"],
            f"{r['factor']} = {r['value']}" if r["factor"] else "baseline",
            r["cells"],
            *[r["verdicts"].get(m, "") for m in metrics],
        ]
        for r in d["modes"]
    ]
    notes = "".join(f"<li>{e(r['mode'])}: {e(n)}</li>" for r in d["modes"] for n in r["notes"])
    return _table(["mode", "change", "cells", *metrics], rows) + (f"<ul>{notes}</ul>" if notes else "")


def _environment(env: dict[str, Any]) -> str:
    rows = [
        ["vLLM", env["vllm"]],
        ["torch", env["torch"]],
        ["build", env["build"]],
        ["driver", env["driver"]],
        ["GPUs", ", ".join(env["gpus"]) or env["gpu_note"]],
        ["CPU", f"{env['cpu']} ({env['cpus']} CPUs)"],
        ["RAM", f"{env['ram_gib']} GiB"],
        ["profile", env["profile_file"]],
        ["ready after", f"{env['ready_s']} s"],
        ["KV figures", env["figures"]],
    ]
    cmd = " ".join(env["command"])
    return _table(["fact", "value"], rows) + f"<p><b>launch command</b></p><pre>{e(cmd) or 'not recorded'}</pre>"


def render_html(d: dict[str, Any], now: str) -> str:
    dec = d.get("decision")
    title = f"oomkit report: {dec['verdict']}" if dec else "oomkit report: measurements"
    parts = [
        # The policy comes first: nothing in the document is read before it applies.
        f"<!DOCTYPE html><html lang='en'><head><meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        "<meta charset='utf-8'>",
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1><p class='muted'>from {e(d['source'])}, generated {e(now)}, request set "
        f"{e(d['request_set_id'])}</p>",
        _verdict(dec),
        "<h2>Charts</h2>",
        _charts(d),
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
