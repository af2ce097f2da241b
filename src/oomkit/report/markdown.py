"""The Markdown report: the same content as the HTML one, as text tables (no charts: the figures
behind them are in the tables)."""

from __future__ import annotations

from typing import Any


def _cell(v: Any) -> str:
    return str("" if v is None else v).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]


def _decision(dec: dict[str, Any] | None) -> list[str]:
    if not dec:
        return ["**No decision yet**: run `oomkit decide RUN --requirements R.yaml`.", ""]
    out = [f"**Verdict: `{dec['verdict']}`** (team profile: {dec['team']['name']})", "",
           f"Rule `{dec['rule']['id']}`: {dec['rule']['text']}", "", dec["summary"], ""]
    out += _table(["number", "value"], [[k, v] for k, v in dec["numbers"].items()]) + ["", "Next:"]
    out += [f"- {r}" for r in dec["recommendations"]] + ["", "Evidence:"]
    out += [f"- `{_cell(x)}`" for x in dec["evidence"][:8]] + [""]
    return out


def render_markdown(d: dict[str, Any], now: str) -> str:
    dec = d.get("decision")
    out = [f"# oomkit report: {dec['verdict'] if dec else 'measurements'}", "",
           f"From `{d['source']}`, generated {now}, request set `{d['request_set_id']}`.", ""]
    out += _decision(dec)
    out += ["## Load levels", ""] + _table(
        ["concurrency", "holds", "why", "peak memory bytes", "max KV usage", "TTFT p95 ms", "e2e p95 ms", "source"],
        [[p["concurrency"], p["ok"], p["why"], p["figures"].get("peak_memory_bytes"), p["figures"].get("max_kv_usage"),
          p["figures"].get("ttft_ms_p95"), p["figures"].get("latency_ms_p95"), p["source"]] for p in d["load_points"]])
    out += ["", "## Hit rate per mode", ""] + _table(["mode", "hit rate", "range"],
                                                     [[h["mode"], f"{h['hit_rate']:.3f}", f"{h['min']:.3f}..{h['max']:.3f}"]
                                                      for h in d["hit_rates"]])
    if d["modes"]:
        metrics = sorted({m for r in d["modes"] for m in r["verdicts"]})
        out += ["", "## Comparisons", ""] + _table(
            ["mode", "change", *metrics],
            [[r["mode"], f"{r['factor']} = {r['value']}" if r["factor"] else "baseline",
              *[r["verdicts"].get(m, "") for m in metrics]] for r in d["modes"]])
    if dec:
        for title, key in (("Team criteria", "criteria"), ("Decision checklist", "checklist_items")):
            out += ["", f"## {title}", ""] + _table(["item", "status", "detail"],
                                                    [[i["title"], i["status"], i["detail"]] for i in dec[key]])
    env = d["environment"]
    out += ["", "## Environment", "", f"- vLLM: {env['vllm']}; torch {env['torch']}; build {env['build']}; "
            f"driver {env['driver']}", f"- GPUs: {', '.join(env['gpus']) or env['gpu_note']}",
            f"- launch command: `{' '.join(env['command']) or 'not recorded'}`", "", "## Untested scenarios", ""]
    out += [f"- {u}" for u in d["untested"]]
    return "\n".join(out) + "\n"
