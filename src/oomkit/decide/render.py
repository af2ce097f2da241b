"""The terminal view of a decision: verdict, rule, numbers, next steps, checklist, evidence."""

from __future__ import annotations

from typing import Any

MARK = {"done": "[x]", "missing": "[ ]", "failed": "[!]"}


def render(d: dict[str, Any]) -> str:
    lines = [
        f"verdict:   {d['verdict']}  (team profile: {d['team']['name']})",
        f"rule:      {d['rule']['id']}: {d['rule']['text']}",
        f"why:       {d['summary']}",
    ]
    if d["numbers"]:
        lines.append(
            "numbers:   " + ", ".join(f"{k}={v}" for k, v in d["numbers"].items() if not isinstance(v, (dict, list)))
        )
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


def _evidence(e: dict[str, Any]) -> str:
    if e.get("file") and e.get("line"):
        return f"{e['file']}:{e['line']}: {str(e.get('text'))[:140]}"
    if e.get("source"):
        return f"{e['source']}: {e.get('why')}"
    return ", ".join(f"{k}={str(v)[:100]}" for k, v in e.items())
