"""The Markdown report: the same content as the HTML one, as text tables (no charts: the figures
behind them are in the tables). Markdown viewers render raw HTML and links, so every string from
logs, servers and files is escaped: text with backslashes, code in a fence it cannot close."""

from __future__ import annotations

import json
import re
from typing import Any

# Raw HTML, autolinks, entities, links and images, code spans and table cells start with these.
_MARKUP = re.compile(r"([\\`<>&\[\]|])")
_TICKS = re.compile(r"`+")


def _cell(v: Any) -> str:
    """Text: shown as written, never read as markup."""
    return _MARKUP.sub(r"\\\1", str("" if v is None else v)).replace("\r", " ").replace("\n", " ")


def _code(v: Any) -> str:
    """A code span (HTML inside is not rendered) whose fence is longer than any backtick run in it."""
    text = json.dumps(v, default=str) if isinstance(v, (dict, list)) else str("" if v is None else v)
    text = text.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(t) for t in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]


def _decision(dec: dict[str, Any] | None) -> list[str]:
    if not dec:
        return ["**No decision yet**: run `oomkit decide RUN --requirements R.yaml`.", ""]
    out = [
        f"**Verdict: {_code(dec['verdict'])}** (team profile: {_cell(dec['team']['name'])})",
        "",
        f"Rule {_code(dec['rule']['id'])}: {_cell(dec['rule']['text'])}",
        "",
        _cell(dec["summary"]),
        "",
    ]
    out += _table(["number", "value"], [[k, v] for k, v in dec["numbers"].items()]) + ["", "Next:"]
    out += [f"- {_cell(r)}" for r in dec["recommendations"]] + ["", "Evidence:"]
    out += [f"- {_code(x)}" for x in dec["evidence"][:8]] + [""]
    return out


def render_markdown(d: dict[str, Any], now: str) -> str:
    dec = d.get("decision")
    out = [
        f"# oomkit report: {_cell(dec['verdict'] if dec else 'measurements')}",
        "",
        f"From {_code(d['source'])}, generated {_cell(now)}, request set {_code(d['request_set_id'])}.",
        "",
    ]
    out += _decision(dec)
    out += ["## Load levels", ""] + _table(
        ["concurrency", "holds", "why", "peak memory bytes", "max KV usage", "TTFT p95 ms", "e2e p95 ms", "source"],
        [
            [
                p["concurrency"],
                p["ok"],
                p["why"],
                p["figures"].get("peak_memory_bytes"),
                p["figures"].get("max_kv_usage"),
                p["figures"].get("ttft_ms_p95"),
                p["figures"].get("latency_ms_p95"),
                p["source"],
            ]
            for p in d["load_points"]
        ],
    )
    out += ["", "## Hit rate per mode", ""] + _table(
        ["mode", "hit rate", "range"],
        [[h["mode"], f"{h['hit_rate']:.3f}", f"{h['min']:.3f}..{h['max']:.3f}"] for h in d["hit_rates"]],
    )
    if d["modes"]:
        metrics = sorted({m for r in d["modes"] for m in r["verdicts"]})
        out += ["", "## Comparisons", ""] + _table(
            ["mode", "change", *metrics],
            [
                [
                    r["mode"],
                    f"{r['factor']} = {r['value']}" if r["factor"] else "baseline",
                    *[r["verdicts"].get(m, "") for m in metrics],
                ]
                for r in d["modes"]
            ],
        )
    if dec:
        for title, key in (("Team criteria", "criteria"), ("Decision checklist", "checklist_items")):
            out += ["", f"## {title}", ""] + _table(
                ["item", "status", "detail"], [[i["title"], i["status"], i["detail"]] for i in dec[key]]
            )
    env = d["environment"]
    out += [
        "",
        "## Environment",
        "",
        f"- vLLM: {_cell(env['vllm'])}; torch {_cell(env['torch'])}; "
        f"build {_cell(env['build'])}; driver {_cell(env['driver'])}",
        f"- GPUs: {_cell(', '.join(env['gpus']) or env['gpu_note'])}",
        f"- launch command: {_code(' '.join(env['command']) or 'not recorded')}",
        "",
        "## Untested scenarios",
        "",
    ]
    out += [f"- {_cell(u)}" for u in d["untested"]]
    return "\n".join(out) + "\n"
