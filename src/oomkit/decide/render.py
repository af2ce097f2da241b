"""The terminal view of a decision: verdict, rule, numbers, next steps, checklist, evidence. The
labels, units and evidence lines defined here are the report's too (oomkit.report.view)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oomkit.decide.model import DecisionDoc, EvidenceDoc
from oomkit.units import fmt_figure, fmt_value

MARK = {"done": "[x]", "missing": "[ ]", "failed": "[!]"}
# The numbers a rule returns, as a reader says them; units come from the key (oomkit.units.unit_of)
# or from the unit named here.
LABELS: dict[str, tuple[str, str | None]] = {
    "target_concurrency": ("target concurrency", "count"),
    "target_with_reserve": ("target with the peak reserve", "count"),
    "reserve_pct": ("peak reserve", None),
    "capacity_concurrency": ("capacity (highest level that holds)", "count"),
    "first_bad_concurrency": ("first level that fails", "count"),
    "max_tested": ("highest level measured", "count"),
    "headroom_pct": ("headroom at the target", None),
    "engines_needed": ("replicas needed", "count"),
    "gpus_per_engine": ("GPUs per replica", "count"),
    "estimated_max_model_len": ("vLLM's estimated maximum model length", None),
    "longest_request_tokens": ("longest required request", None),
    "context_limit_tokens": ("context limit found", None),
    "kv_cache_tokens": ("KV cache pool", None),
    "model_weights_gib": ("model weights", None),
    "available_kv_cache_gib": ("KV cache memory", None),
    "max_concurrency": ("vLLM's maximum concurrency at max_model_len", None),
    "max_concurrency_tokens": ("tokens per request in that estimate", None),
    "max_model_len": ("max model length", None),
}
_UNIT_SUFFIX = re.compile(r"_(gib|bytes|pct|tokens|s|ms)$")


@dataclass(frozen=True)
class EvidenceLine:
    """One piece of evidence as a reader sees it."""

    where: str
    """`file:line`, a file, a measured level (`ladder.json: concurrency rung c=2`) or a kind of check."""
    text: str
    quoted: bool
    """True: `text` is the line as written in the file or sent by the server, shown verbatim."""


def label(key: str) -> str:
    """How a reader names the figure `key`; its unit is written after the value, not in the name."""
    return LABELS[key][0] if key in LABELS else _UNIT_SUFFIX.sub("", key).replace("_", " ")


def describe(value: object, key: str = "") -> str:
    """A value in words: a number in its unit, a list joined, a mapping as `name value` pairs."""
    if isinstance(value, dict):
        return "; ".join(f"{label(k)} {describe(v, str(k))}" for k, v in value.items() if v not in (None, "", [], {}))
    if isinstance(value, (list, tuple)):
        return ", ".join(describe(v, key) for v in value)
    unit = LABELS[key][1] if key in LABELS else None
    return fmt_value(value, unit) if unit else fmt_figure(key, value)


def number_rows(numbers: Mapping[str, object]) -> list[tuple[str, str]]:
    """A decision's numbers as (label, value with its unit), in the rule's order."""
    return [(label(k), describe(v, k)) for k, v in numbers.items()]


def evidence_line(e: EvidenceDoc) -> EvidenceLine:
    """Where a piece of evidence is and what it says: the quoted line of a file when it has one."""
    if isinstance(e.get("criterion"), dict):
        c = e["criterion"]
        return EvidenceLine(
            f"criterion {c.get('key')}", f"{c.get('title')}: {c.get('status')}: {c.get('detail')}", False
        )
    if e.get("recipe_row"):
        return EvidenceLine("recipe", f"{e['recipe_row']}: found {describe(e.get('found'))}: {e.get('why')}", False)
    if e.get("file"):
        where = _path(e) + (f":{e['line']}" if e.get("line") else "")
        if e.get("text") is not None:
            return EvidenceLine(where, str(e["text"]), True)
        if e.get("key"):
            return EvidenceLine(where, f"{e['key']}: {describe(e.get('value'))}", False)
    if e.get("request_id") and e.get("text") is not None:
        kind = f" ({e['error_kind']})" if e.get("error_kind") else ""
        return EvidenceLine(f"{_path(e, 'requests.jsonl')}: request {e['request_id']}{kind}", str(e["text"]), True)
    if e.get("source"):
        verdict = "" if "ok" not in e else "holds: " if e["ok"] else "fails: "
        return EvidenceLine(str(e["source"]), f"{verdict}{e.get('why') or ''}", False)
    return EvidenceLine("", describe({k: v for k, v in e.items() if k != "run"}), False)


def _path(e: EvidenceDoc, file: str | None = None) -> str:
    """The evidence's file, under its run folder when the file is named relative to it."""
    name = str(file or e["file"])
    run = e.get("run")
    return str(Path(run) / name) if run and not Path(name).is_absolute() else name


def render(d: DecisionDoc) -> str:
    lines = [
        f"verdict:   {d['verdict']}  (team profile: {d['team']['name']})",
        f"why:       {d['summary']}",
        f"rule:      {d['rule']['id']}: {d['rule']['text']}",
    ]
    if d["numbers"]:
        lines.append("numbers:   " + ", ".join(f"{k} {v}" for k, v in number_rows(d["numbers"])))
    lines += ["next:"] + [f"  - {r}" for r in d["recommendations"]]
    lines += ["evidence:"] + [f"  - {_evidence(e)}" for e in d["evidence"][:6]]
    lines += [f"criteria ({d['team']['name']}):"] + [
        f"  {MARK[i['status']]} {i['title']}: {i['detail']}" for i in d["criteria"]
    ]
    lines += ["checklist:"] + [f"  {MARK[i['status']]} {i['title']}: {i['detail']}" for i in d["checklist_items"]]
    if d["untested"]:
        lines += ["untested:"] + [f"  - {u}" for u in d["untested"][:8]]
    if d.get("run_dir"):
        lines.append(f"decision:  {d['run_dir']}/decision.json (report: oomkit report {d['run_dir']})")
    return "\n".join(lines)


def _evidence(e: EvidenceDoc) -> str:
    ev = evidence_line(e)
    text = ev.text[:140] + ("..." if len(ev.text) > 140 else "")
    return f"{ev.where}: {text}" if ev.where else text
