"""The report's content, from a decision folder (its decision and the runs it weighed) or from one
run folder (no verdict yet): plain data that every format renders the same way."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TypedDict, cast

from oomkit.compare.document import Judgement, Setting
from oomkit.decide.documents import number
from oomkit.decide.evidence import RunEvidence, read_evidence, written_by_oomkit
from oomkit.decide.facts import CellFigure, Facts
from oomkit.decide.model import DecisionDoc, InputDoc, PointDoc
from oomkit.decide.requirements import parse_requirements
from oomkit.errors import InputError
from oomkit.fsio import json_object, read_jsonl
from oomkit.serial import Json, JsonObject
from oomkit.units import GIB

SCHEMA = "oomkit.report/1"
KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPT_NAMES = ("vllm:num_preemptions_total", "vllm:num_preemptions")
_KEY = re.compile(r"^([^{]+)")
MODE_FIGURES: tuple[CellFigure, ...] = (
    "concurrency",
    "peak_memory_bytes",
    "prefix_cache_hit_rate",
    "ttft_ms_p95",
    "latency_ms_p95",
    "session_ms_p95",
    "preemptions",
    "errors",
    "agent_success_share",
)
"""A compared mode's figures the report lists per cell."""


class TimelinePoint(TypedDict):
    t_s: float
    label: Json
    kv_usage: float | None
    preemptions: float | None
    """Preempted sequences since the first scrape."""


class Timeline(TypedDict):
    run: str
    points: list[TimelinePoint]


class Environment(TypedDict):
    """The stack the runs measured, from the first launch's manifest and environment snapshot."""

    vllm: str
    torch: str | None
    build: str | None
    driver: str | None
    gpus: list[str]
    gpu_note: str | None
    cpu: str | None
    cpus: int | None
    ram_gib: float | None
    command: list[str]
    profile_file: str | None
    ready_s: float | None
    figures: JsonObject


class HitRate(TypedDict):
    """A compared mode's prefix-cache hit rate over its cells."""

    mode: str
    hit_rate: float
    min: float
    max: float
    factor: str | None
    value: Setting


class ModeRow(TypedDict):
    """A compared mode: its change, its cells' figures, and the verdict per metric."""

    mode: str
    factor: str | None
    value: Setting
    side: str | None
    cells: int
    notes: list[str]
    figures: dict[str, list[float | None]]
    verdicts: dict[str, Judgement]


class ReportDoc(TypedDict):
    """The report's content (what `oomkit report --format json` writes, with `generated_at`)."""

    schema: str
    source: str
    decision: DecisionDoc | None
    environment: Environment
    load_points: list[PointDoc]
    hit_rates: list[HitRate]
    modes: list[ModeRow]
    timelines: list[Timeline]
    untested: list[str]
    runs: list[InputDoc]
    request_set_id: str | None
    sampling: str | None


def _sum_metric(samples: JsonObject, names: tuple[str, ...]) -> float | None:
    for name in names:
        vals = [_sample(v) for k, v in samples.items() if (m := _KEY.match(k)) and m.group(1) == name]
        if vals:
            return float(sum(vals))
    return None


def _sample(value: Json) -> float:
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"a metric sample is a number, not {type(value).__name__}")


def timeline(run: RunEvidence) -> list[TimelinePoint]:
    """KV usage and cumulative preemptions from one folder's metrics.jsonl, seconds from its start."""
    rows = read_jsonl(Path(run.path) / "metrics.jsonl")
    if not rows:
        return []
    t0 = number(rows[0].get("t_unix_s")) or 0.0
    base: float | None = None
    out: list[TimelinePoint] = []
    for r in rows:
        samples = json_object(r.get("samples"))
        pre = _sum_metric(samples, PREEMPT_NAMES)
        base = pre if base is None and pre is not None else base
        out.append(
            {
                "t_s": round((number(r.get("t_unix_s")) or t0) - t0, 2),
                "label": r.get("label"),
                "kv_usage": _sum_metric(samples, KV_NAMES),
                "preemptions": None if pre is None or base is None else pre - base,
            }
        )
    return out


def _environment(facts: Facts) -> Environment:
    launch = facts.launches[0].manifest if facts.launches else {}
    snap = facts.env_snapshot() or {}
    sw, host, drv = snap.get("software") or {}, snap.get("host") or {}, snap.get("driver") or {}
    return {
        "vllm": f"{sw.get('vllm_distribution') or 'vllm'} {sw.get('vllm_version') or launch.get('vllm_version') or '?'}",
        "torch": sw.get("torch_version"),
        "build": sw.get("cuda_flavour"),
        "driver": drv.get("driver_version"),
        "gpus": [
            f"{g.get('name')} ({(g.get('memory_total_bytes') or 0) / GIB:.0f} GiB)" for g in snap.get("gpus") or []
        ],
        "gpu_note": snap.get("gpu_note"),
        "cpu": host.get("cpu_model"),
        "cpus": host.get("cpu_count"),
        "ram_gib": round((host.get("ram_total_bytes") or 0) / GIB, 1) or None,
        "command": launch.get("command") or [],
        "profile_file": launch.get("profile_file"),
        "ready_s": launch.get("ready_s"),
        "figures": launch.get("figures") or {},
    }


def _hit_rates(facts: Facts) -> list[HitRate]:
    out: list[HitRate] = []
    for mode in facts.modes():
        rates = [r for c in facts.mode_cells(mode["name"]) if (r := c.get("prefix_cache_hit_rate")) is not None]
        if rates:
            out.append(
                {
                    "mode": mode["name"],
                    "hit_rate": sum(rates) / len(rates),
                    "min": min(rates),
                    "max": max(rates),
                    "factor": mode.get("factor"),
                    "value": mode.get("value"),
                }
            )
    return out


def _modes(facts: Facts) -> list[ModeRow]:
    crun, comp = facts.compare()
    if comp is None:
        return []
    rows: list[ModeRow] = []
    for mode in comp["modes"]:
        cells = facts.mode_cells(mode["name"])
        verdicts = {v["metric"]: v["verdict"] for v in comp["comparisons"].get(mode["name"], [])}
        rows.append(
            {
                "mode": mode["name"],
                "factor": mode.get("factor"),
                "value": mode.get("value"),
                "side": mode.get("side"),
                "cells": len(cells),
                "notes": mode.get("notes", []),
                "figures": {k: [c.get(k) for c in cells] for k in MODE_FIGURES},
                "verdicts": verdicts,
            }
        )
    return rows


def _request_set_header(facts: Facts) -> JsonObject:
    """The first request-set header among the runs (ladder, bench and compare folders write one)."""
    for run in facts.runs:
        path = Path(run.path) / "request-set.jsonl"
        if path.is_file():
            with open(path, encoding="utf-8", errors="replace") as fh:
                first = fh.readline()
            try:
                header = json.loads(first)
            except ValueError:
                continue
            if isinstance(header, dict) and str(header.get("kind", "")).startswith("oomkit.request_set"):
                return header
    return {}


def sampling(facts: Facts) -> str | None:
    """How the requests sampled, stated in the report because it decides what a CPU hybrid engine
    survives (seeded sampling kills it on chunked prefill) and whether reruns can be identical."""
    workload = json_object(_request_set_header(facts).get("workload"))
    if "temperature" not in workload:
        return None
    written = workload["temperature"]
    if not isinstance(written, (int, float, str)):
        raise TypeError(f"a temperature is a number, not {type(written).__name__}")
    temperature = float(written)
    text = "greedy (temperature 0)" if temperature == 0 else f"temperature {temperature:g}"
    if workload.get("seed") is not None:
        text += f", seed {workload['seed']}"
    if workload.get("ignore_eos"):
        text += ", ignore_eos (every reply runs to its max tokens)"
    return text


def build(facts: Facts, decision: DecisionDoc | None, source: str) -> ReportDoc:
    points = [p.to_dict() for p in facts.capacity().points]
    folders = {r.path: r for r in facts.ladders + [s for c in facts.compares for s in c.servers]}
    timelines: list[Timeline] = [{"run": path, "points": timeline(r)} for path, r in folders.items()]
    poc = facts.poc()
    untested = (decision.get("untested") if decision else None) or list(poc.get("untested", []) if poc else [])
    return {
        "schema": SCHEMA,
        "source": source,
        "decision": decision,
        "environment": _environment(facts),
        "load_points": points,
        "hit_rates": _hit_rates(facts),
        "modes": _modes(facts),
        "timelines": [t for t in timelines if t["points"]],
        "untested": untested,
        "runs": [r.to_dict() for r in facts.runs],
        "request_set_id": facts.request_set_id,
        "sampling": sampling(facts),
    }


def report_data(ref: str, runs_dir: str = "runs") -> ReportDoc:
    """The report of a decision folder or of one run folder (path, id or prefix)."""
    with written_by_oomkit([ref]):
        run = read_evidence(ref, runs_dir)
        if run.kind == "import":
            facts = Facts([run], None, run.request_set_id)
            return build(facts, None, run.path)
        decision_file = Path(run.path) / "decision.json"
        if run.manifest.get("kind") == "decision":
            if not decision_file.is_file():
                raise InputError(f"{run.path}: a decision folder without decision.json", hint="run oomkit decide again")
            # decision.json as oomkit.decide wrote it; a field of another shape is WRONG_SHAPE.
            decision = cast(DecisionDoc, json.loads(decision_file.read_text(encoding="utf-8")))
            inputs = [read_evidence(i["path"]) for i in decision.get("inputs", []) if not _is_server(i, decision)]
            req = parse_requirements(decision["requirements"], "decision.json requirements")
            facts = Facts(inputs, req, decision.get("request_set_id"))
            return build(facts, decision, run.path)
        return build(Facts([run], None, run.request_set_id), None, run.path)


def _is_server(item: InputDoc, decision: DecisionDoc) -> bool:
    # Compare folders list their server runs as inputs too; reading the compare folder brings them.
    return any(item["path"] in i.get("servers", []) for i in decision.get("inputs", []))
