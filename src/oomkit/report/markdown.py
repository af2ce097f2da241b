"""The Markdown report: the same content as the HTML one, as text tables (no charts: the figures
behind them are in the tables). Markdown viewers render raw HTML and links, so every string from
logs, servers and files is escaped: text with backslashes, code in a fence it cannot close."""

from __future__ import annotations

import re
from collections.abc import Sequence

from oomkit.decide.model import DecisionDoc
from oomkit.decide.render import describe
from oomkit.report import view
from oomkit.report.model import ReportDoc

# Raw HTML, autolinks, entities, links and images, code spans and table cells start with these.
_MARKUP = re.compile(r"([\\`<>&\[\]|])")
_TICKS = re.compile(r"`+")


def _cell(v: object) -> str:
    """Text: shown as written, never read as markup."""
    return _MARKUP.sub(r"\\\1", str("" if v is None else v)).replace("\r", " ").replace("\n", " ")


def _code(v: object) -> str:
    """A code span (HTML inside is not rendered) whose fence is longer than any backtick run in it."""
    text = describe(v) if isinstance(v, (dict, list)) else str("" if v is None else v)
    text = text.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(t) for t in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(head: list[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]


def _decision(dec: DecisionDoc | None) -> list[str]:
    if not dec:
        return ["**No decision yet**: these are measurements only; run `oomkit decide RUN --requirements R.yaml`.", ""]
    out = [f"**Verdict: {_code(dec['verdict'])}**: {_cell(dec['summary'])}", "", "Next:"]
    out += [f"- {_cell(r)}" for r in dec["recommendations"]] + [""]
    out += _table(["number", "value"], [list(r) for r in view.decision_numbers(dec)]) + [""]
    out += [
        f"Rule {_code(dec['rule']['id'])}: {_cell(dec['rule']['text'])}. "
        f"Team profile: {_cell(dec['team']['name'])} ({_cell(dec['team']['asks'])}).",
        "",
    ]
    return out


def _evidence(dec: DecisionDoc) -> list[str]:
    out = ["## Evidence", ""]
    for ev in view.evidence(dec):
        where = f"{_code(ev.where)}: " if ev.where else ""
        out.append(f"- {where}{_code(ev.text) if ev.quoted else _cell(ev.text)}")
    return out + [""]


def _levels(d: ReportDoc) -> list[str]:
    levels = view.levels(d)
    out = ["## Load levels", ""]
    marks = view.mark_lines(view.marks(d, levels))
    out += [f"- {_cell(m)}" for m in marks] + ([""] if marks else [])
    out += _table(view.LEVEL_HEAD, view.level_rows(levels)) if levels else ["No load measured."]
    forecast = view.forecast_rows(d["decision"])
    if forecast:
        out += ["", "Forecast by vLLM's own scheduler (decide's sizing), not measured:", ""]
        out += _table(view.FORECAST_HEAD, forecast)
    if d["hit_rates"]:
        out += ["", "## Hit rate per mode", ""]
        out += _table(["mode", "prefix-cache hit rate", "range over the cells"], view.hit_rate_rows(d))
    if d["modes"]:
        _, titles = view.mode_head(d)
        out += [
            "",
            "## Comparisons",
            "",
            "Medians of each mode's cells; the verdict in brackets is against the baseline.",
            "",
        ]
        out += _table(["mode", "change", "cells", *titles], view.mode_rows(d))
        notes = [f"- {_cell(r['mode'])}: {_cell(n)}" for r in d["modes"] for n in r["notes"]]
        out += [""] + notes if notes else []
    return out


def render_markdown(d: ReportDoc, now: str) -> str:
    dec = d.get("decision")
    out = [f"# oomkit report: {_cell(dec['verdict'] if dec else 'measurements')}", ""]
    out += _decision(dec)
    out += [
        f"From {_code(d['source'])}, generated {_cell(now)}, request set {_code(d['request_set_id'] or 'none')}"
        + (f", sampling {_cell(d['sampling'])}" if d.get("sampling") else "")
        + ".",
        "",
    ]
    out += _evidence(dec) if dec else []
    out += _levels(d)
    if dec:
        for title, items in (("Team criteria", dec["criteria"]), ("Decision checklist", dec["checklist_items"])):
            out += ["", f"## {title}", ""] + _table(
                ["item", "status", "detail"], [[i["title"], i["status"], i["detail"]] for i in items]
            )
    env = d["environment"]
    out += ["", "## Environment", ""]
    out += [f"- {_cell(name)}: {_cell(value)}" for name, value in view.environment_rows(env)]
    out += [f"- launch command: {_code(' '.join(env['command']) or 'not recorded')}", "", "## Untested scenarios", ""]
    out += [f"- {_cell(u)}" for u in d["untested"]]
    return "\n".join(out) + "\n"
