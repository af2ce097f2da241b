"""How much to expand, by forecast: when the target with its peak reserve is above the measured
capacity, decide runs `oomkit forecast` (vLLM's own scheduler on the planner's KV pool) on candidate
layouts and names the smallest that holds the target + reserve within the latency SLO, instead of
ceil(target / capacity). Candidates: with `deployment:` in the requirements, the planner's and the
recipe strategies' layouts of that model and GPU (topology.candidate_layouts); without it, N DP
engines of the measured server. The step time is calibrated on the measured ladder (or bench) run
when there is one. Without vLLM, or when the forecast fails, the multiplication stays and the
decision says why. Every figure here is a forecast and says so."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from oomkit.decide.facts import DecisionFacts
from oomkit.decide.topology import candidate_layouts, engines_needed, gpus_used
from oomkit.errors import OomkitError
from oomkit.serial import JsonObject, to_json_object

if TYPE_CHECKING:
    from oomkit.forecast.layouts import LayoutSpec
    from oomkit.forecast.result import Forecast, LayoutForecast
    from oomkit.launch.profile import Profile
    from oomkit.plan import PlanRequest

SIZING_TIME_LIMIT_S = 45.0
"""Wall seconds for all of decide's forecasts (decide answers in about a minute on the CPU testbed)."""
SIZING_MAX_STEPS = 400_000
"""Scheduler steps for all of them (~1 ms a step on a 2-core machine)."""
MAX_DP_ENGINES = 16
"""Without a deployment: DP engines of the measured server tried, at most."""
MAX_GPU_COUNTS = 3
MAX_LAYOUTS_PER_COUNT = 6
MULTIPLICATION = "ceil(target_with_reserve / capacity)"
CURVE_KEYS = (
    "concurrency",
    "verdict",
    "preemptions",
    "max_kv_usage",
    "max_kv_usage_sampled",
    "ttft_ms_p95",
    "latency_ms_p95",
)


@dataclass(frozen=True)
class Candidate:
    layout: str
    engines: int
    gpus: int
    holds: bool
    why: str
    knee: JsonObject
    rung: JsonObject
    """The forecast's rung at the target with reserve: its verdict and the figures judged."""
    curve: tuple[JsonObject, ...] = ()
    """Every rung this layout was forecast at (the measured server's also at the measured levels), for
    the report to draw against the measured ladder: the figures CURVE_KEYS names."""


@dataclass(frozen=True)
class ForecastSizing:
    status: str
    """forecast (a layout named), fallback (the multiplication stands, with the reason) or not_needed."""
    method: str
    reason: str
    engines_by_multiplication: int | None
    layout: str | None = None
    engines: int | None = None
    gpus: int | None = None
    concurrency: int | None = None
    step_time_model: str | None = None
    step_time_source: str | None = None
    workload: str | None = None
    vllm: str | None = None
    candidates: tuple[Candidate, ...] = ()
    wall_s: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> JsonObject:
        out = to_json_object(self)
        del out["candidates"], out["notes"]  # after `forecast`, as they always were
        out["wall_s"] = round(self.wall_s, 2)
        out["forecast"] = self.status == "forecast"
        out["candidates"] = [to_json_object(c) for c in self.candidates]
        out["notes"] = list(self.notes)
        return out

    def recommendation(self) -> str | None:
        if self.status != "forecast":
            return None
        mult = f"; the multiplication {MULTIPLICATION} gave {self.engines_by_multiplication}"
        return (
            f"forecast (not measured): {self.layout} ({self.gpus} GPU(s), {self.engines} engine(s)) holds "
            f"{self.concurrency} dialogs within the SLO on vLLM {self.vllm}'s scheduler, step time "
            f"{self.step_time_model}" + (mult if self.engines_by_multiplication else "")
        )


def forecast_sizing(f: DecisionFacts) -> ForecastSizing:
    """The forecast's answer to "how much more", or the multiplication with the reason it stands."""
    cap, need = f.capacity(), f.req.target_with_reserve()
    by_mult = engines_needed(need, cap.last_good)
    if not cap.points or (cap.last_good is not None and cap.last_good >= need):
        return ForecastSizing("not_needed", "measured", "the measured capacity covers the target with reserve", by_mult)
    t0 = time.monotonic()
    try:
        return _sized(f, math.ceil(need), by_mult, t0)
    except OomkitError as err:
        return _fallback(by_mult, f"the forecast could not run: {err.one_line()}", t0)


@dataclass(frozen=True)
class _Tried:
    """What the forecasts that ran found, for a fallback to report."""

    concurrency: int | None = None
    step_time_model: str | None = None
    step_time_source: str | None = None
    workload: str | None = None
    vllm: str | None = None
    candidates: tuple[Candidate, ...] = ()


def _fallback(by_mult: int | None, why: str, t0: float, tried: _Tried = _Tried()) -> ForecastSizing:
    method = MULTIPLICATION if by_mult else "none (no level held: no capacity to multiply)"
    return ForecastSizing(
        "fallback",
        method,
        why,
        by_mult,
        concurrency=tried.concurrency,
        step_time_model=tried.step_time_model,
        step_time_source=tried.step_time_source,
        workload=tried.workload,
        vllm=tried.vllm,
        candidates=tried.candidates,
        wall_s=time.monotonic() - t0,
    )


def _sized(f: DecisionFacts, need: int, by_mult: int | None, t0: float) -> ForecastSizing:
    from oomkit.forecast.vllm_api import load_vllm

    api = load_vllm()  # vLLM missing or of another version: MissingDependency, the fallback says so
    base, groups = _candidates(f)
    run_path = _measured_run(f)
    workload = _workload(f)
    retention = _measured_retention(f)
    tried: list[Candidate] = []
    model: tuple[str, str | None] = ("", None)
    for index, specs in enumerate(groups):
        left_s = SIZING_TIME_LIMIT_S - (time.monotonic() - t0)
        if left_s <= 1:
            break
        # The first candidates (the measured server itself, or the smallest layout) are also forecast at
        # the levels the ladder measured: the report draws that curve through the measured points.
        measured = tuple(int(p.concurrency) for p in f.capacity().points) if index == 0 else ()
        result = _forecast(f, _Basis(base, workload, run_path, retention), specs, need, left_s, measured)
        model = (result.step_time_model, run_path)
        found = [_judge(f, lay, need) for lay in result.layouts]
        tried += found
        holding = [c for c in found if c.holds]
        if holding and index == 0 and f.req.deployment is None:
            return _fallback(
                by_mult,
                f"the forecast holds {need} dialogs on the measured server itself, where the measurement did not: "
                "the forecast disagrees with the evidence here and is not used",
                t0,
                _Tried(need, result.step_time_model, run_path, workload, api.version, tuple(tried)),
            )
        if holding:
            best = min(holding, key=lambda c: (c.gpus, _latency_ms(c)))
            return ForecastSizing(
                "forecast",
                "forecast",
                f"the smallest candidate whose forecast holds {need} dialogs: no preemption, no error, "
                "TTFT and e2e p95 within the SLO",
                by_mult,
                best.layout,
                best.engines,
                best.gpus,
                need,
                result.step_time_model,
                run_path if result.step_time_model == "calibrated" else None,
                workload,
                api.version,
                tuple(tried),
                time.monotonic() - t0,
                tuple(_notes(f, base)),
            )
    why = "no candidate layout's forecast holds the target with reserve within the SLO" + (
        " before the forecast's time limit" if time.monotonic() - t0 >= SIZING_TIME_LIMIT_S - 1 else ""
    )
    return _fallback(by_mult, why, t0, _Tried(need, model[0] or None, model[1], workload, api.version, tuple(tried)))


def _latency_ms(c: Candidate) -> float:
    value = c.rung.get("latency_ms_p95")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _candidates(f: DecisionFacts) -> tuple[PlanRequest, list[tuple[LayoutSpec, ...]]]:
    """(the plan request every candidate starts from, groups of layout specs, fewest GPUs first)."""
    from oomkit.forecast.layouts import LayoutSpec
    from oomkit.plan import PlanRequest

    d = f.req.deployment
    if d is not None:
        used = gpus_used(f.profile_args())
        base = PlanRequest(model=d.model, gpu=d.gpu, max_model_len=f.req.longest_request_tokens())
        layouts = [lay for lay in candidate_layouts(d.model, d.gpu, d.gpus_per_node, used) if lay.dcp == 1]
        counts = sorted({lay.gpus for lay in layouts})[:MAX_GPU_COUNTS]
        return base, [
            tuple(
                LayoutSpec(lay.label, tp=lay.tp, pp=lay.pp, dp=lay.dp, ep=lay.ep) for lay in layouts if lay.gpus == n
            )[:MAX_LAYOUTS_PER_COUNT]
            for n in counts
        ]
    base = _measured_plan(f)
    tp, pp = base.tp or 1, base.pp or 1
    return base, [
        (LayoutSpec(f"dp{n}", tp=tp, pp=pp, dp=n * (base.dp or 1), ep=base.ep),) for n in range(1, MAX_DP_ENGINES + 1)
    ]


def _measured_profile(f: DecisionFacts) -> tuple[Profile, str] | None:
    """The launch profile the measured server ran, and its run folder."""
    from oomkit.launch.profile import recorded_profile

    for r in f.launches:
        prof = recorded_profile(r.manifest)
        if prof is not None:
            return prof, r.path
    return None


def _measured_retention(f: DecisionFacts) -> int | None:
    """The measured server's --prefix-cache-retention-interval: it decides which hybrid-state blocks
    the prefix cache keeps, so the forecast's scheduler must run with the same (vLLM's default: 0)."""
    from oomkit.forecast.engine import VLLM_DEFAULT_RETENTION
    from oomkit.forecast.inputs import RETENTION_ARG, parse_retention

    found = _measured_profile(f)
    if found is None:
        return VLLM_DEFAULT_RETENTION
    prof, path = found
    return parse_retention(prof.arg(RETENTION_ARG, VLLM_DEFAULT_RETENTION), path)


def _measured_plan(f: DecisionFacts) -> PlanRequest:
    from oomkit.errors import InputError
    from oomkit.forecast.inputs import profile_fields
    from oomkit.plan import PlanRequest

    found = _measured_profile(f)
    if found is not None:
        prof, path = found
        fields = profile_fields(prof, path)
        if fields.get("gpu"):
            return PlanRequest(**fields)
        raise InputError(
            f"{path}: the measured server's GPU is not in its profile",
            hint="add `deployment:` (model, gpu) to the requirements",
        )
    raise InputError("no launch profile among the runs", hint="add `deployment:` (model, gpu) to the requirements")


def _measured_run(f: DecisionFacts) -> str | None:
    """The run whose measured token times calibrate the step time: the ladder, else a bench."""
    for r in [*f.ladders, *f.benches]:
        if (Path(r.path) / "requests.jsonl").is_file():
            return r.path
    return None


def _workload(f: DecisionFacts) -> str | None:
    """The traffic measured (a run's request set: sizes its server's tokenizer counted), else the
    requirements' workload, else the built-in agent workload (None)."""
    for r in [*f.ladders, *f.benches]:
        rs = Path(r.path) / "request-set.jsonl"
        if rs.is_file():
            return str(rs)
    return f.req.workload_path()


@dataclass(frozen=True)
class _Basis:
    """What every candidate forecast shares: the measured server's plan request, the traffic, and
    the run folder the step time is calibrated on (None: roofline)."""

    plan: PlanRequest
    workload: str | None
    run: str | None
    retention: int | None
    """The measured server's --prefix-cache-retention-interval (None: dense checkpoints)."""


def _forecast(
    f: DecisionFacts, basis: _Basis, specs: tuple[LayoutSpec, ...], need: int, left_s: float, measured: tuple[int, ...]
) -> Forecast:
    from oomkit.forecast import ForecastRequest, forecast

    base, workload, run = basis.plan, basis.workload, basis.run
    slo = f.req.slo
    levels = tuple(sorted({f.req.concurrent_dialogs, need, *(c for c in measured if c > 0)}))
    return forecast(
        ForecastRequest(
            plan=base,
            workload=workload,
            concurrency=levels,
            steps_per_session=f.req.agent_steps_per_dialog,
            step_time="calibrated" if run else "roofline",
            calibrate_run=run,
            slos={"ttft_ms": slo.ttft_p95_ms, "latency_ms": slo.e2e_p95_ms},
            refine=False,
            max_steps=SIZING_MAX_STEPS,
            time_limit_s=left_s,
            layouts=specs,
            prefix_cache_retention_interval=basis.retention,
        )
    )


def _judge(f: DecisionFacts, lay: LayoutForecast, need: int) -> Candidate:
    slo = f.req.slo
    gpus = int(lay.plan.get("gpus") or 0)
    top = next((r for r in lay.rungs if r.concurrency == need), None)
    full = to_json_object(top.to_dict()) if top else {}
    keep = ("concurrency", "verdict", "preemptions", "errors", "max_kv_usage", "ttft_ms_p95", "latency_ms_p95")
    rung = {k: full[k] for k in keep if k in full}
    if lay.error:
        why = f"does not load: {lay.error}"
    elif top is None:
        why = "the forecast stopped before this concurrency"
    elif lay.knee.concurrency is not None:
        why = f"forecast knee at {lay.knee.concurrency} ({lay.knee.reason})"
    elif top.verdict != "ok":
        why = f"forecast verdict {top.verdict} at {need}"
    elif (top.ttft_ms_p95 or 0) > slo.ttft_p95_ms or (top.latency_ms_p95 or 0) > slo.e2e_p95_ms:
        why = "forecast p95 above the SLO"
    else:
        why = "holds: no preemption, no error, p95 within the SLO"
    holds = why.startswith("holds")
    curve = tuple({k: v for k, v in r.to_dict().items() if k in CURVE_KEYS} for r in lay.rungs)
    return Candidate(lay.layout, lay.engines, gpus, holds, why, lay.knee.to_dict(), rung, curve)


def _notes(f: DecisionFacts, base: PlanRequest) -> list[str]:
    notes = ["every figure of forecast_sizing is a forecast: vLLM's own scheduler on the plan's KV pool, not a run"]
    if f.req.deployment is None:
        notes.append(
            f"candidates: N data-parallel engines of the measured server ({base.model}), routed as vLLM's DP "
            "front-end routes (oomkit.forecast.router)"
        )
    return notes
