"""`forecast(ForecastRequest)`: plan the layout, build vLLM's scheduler on the plan's KV pool, and
run the concurrency rungs on it in order, as `oomkit ladder` runs them on one server (the prefix
cache carries over from rung to rung, the clock runs on), then bisect to the knee as the ladder
does. Every simulation has a step limit and a wall-clock limit. `--layouts` forecasts each layout
on the same traffic, one after the other; DP layouts run one vLLM scheduler per engine behind
vLLM's DP router (forecast.router). Several layouts with a back end run as a parallel sweep
(forecast.sweep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from oomkit.errors import InputError, UsageError
from oomkit.forecast.calibrate import calibrate
from oomkit.forecast.engine import VLLM_DEFAULT_RETENTION, Engine, build_engine
from oomkit.forecast.lanes import Lane
from oomkit.forecast.layouts import LayoutSpec
from oomkit.forecast.result import (
    RELIABILITY_WARNING,
    Forecast,
    LayoutForecast,
    PlanSummary,
    RungForecast,
    TrafficSummary,
    knee_of,
)
from oomkit.forecast.router import DpRouter
from oomkit.forecast.simulate import Budget, Rung
from oomkit.forecast.steptime import StepTimeModel, roofline
from oomkit.forecast.tokens import shared_head
from oomkit.forecast.traffic import Traffic, load_traffic
from oomkit.forecast.vllm_api import load_vllm, minor_of
from oomkit.forecast.warmup import warm_up
from oomkit.loadrun.knee import Knee
from oomkit.plan import Plan, PlanRequest, plan
from oomkit.plan.layouts import Layout
from oomkit.scaleout.cells import Backend

MAX_CONCURRENCY = 100_000
"""Sessions at once per forecast: beyond any single deployment's max_num_seqs x engines we know of."""
DEFAULT_MAX_STEPS = 2_000_000
DEFAULT_TIME_LIMIT_S = 600.0
STEP_TIME_MODELS = ("roofline", "calibrated")


@dataclass(frozen=True)
class ForecastRequest:
    plan: PlanRequest
    workload: str | None = None
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    sessions: int | None = None
    """Instead of rungs: this many sessions, their starts spread evenly over window_s."""
    window_s: float = 0.0
    steps_per_session: int | None = None
    step_time: str = "roofline"
    calibrate_run: str | None = None
    runs_dir: str = "runs"
    slos: dict[str, float] = field(default_factory=dict)
    refine: bool = True
    """Bisect between the last good and the first bad rung, as the ladder does."""
    max_steps: int = DEFAULT_MAX_STEPS
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    layouts: tuple[LayoutSpec, ...] = ()
    """Several layouts on the same traffic (--layouts); each replaces the plan's TP/PP/DP/EP. A
    layout the planner refuses is reported as not loading; empty: the plan's own layout."""
    prefix_cache_retention_interval: int | None = VLLM_DEFAULT_RETENTION
    """The server's --prefix-cache-retention-interval (None: dense), as vLLM's engine passes it to
    its KV-cache manager: it decides which mamba/sliding-window prefixes stay cached."""


def forecast(req: ForecastRequest, backend: Backend | None = None) -> Forecast:
    """With a backend, each layout of several is one cell of a sweep (forecast.sweep: in parallel,
    each with its own step and time limit, a failed cell reported in its layout's `error`); without
    one, the layouts run here one after the other within one limit."""
    t0 = time.monotonic()
    _check_request(req)
    api = load_vllm()
    traffic = load_traffic(req.workload)
    calibrated = calibrate(req.calibrate_run, req.runs_dir) if req.calibrate_run else None
    preqs = [spec.apply(req.plan) for spec in req.layouts] or [req.plan]
    if backend is not None and len(preqs) > 1:
        from oomkit.forecast.sweep import LayoutCell, run_sweep

        cells = [LayoutCell(req, preq, traffic, calibrated, api.version) for preq in preqs]
        layouts = run_sweep(cells, [spec.spelling for spec in req.layouts], backend)
    else:
        budget = Budget(req.max_steps, t0 + req.time_limit_s)
        layouts = [forecast_layout(req, preq, traffic, calibrated, budget, api.version) for preq in preqs]
    models = [lay.step_time for lay in layouts if lay.step_time is not None]
    if not models:
        raise InputError(f"no layout of --layouts loads: {layouts[0].error}", hint="see `oomkit plan --compare`")
    notes = [*traffic.notes, RELIABILITY_WARNING]
    return Forecast(
        step_time_model=models[0].name,
        step_time=models[0],
        traffic=TrafficSummary(
            traffic.name, traffic.source, len(traffic.sessions), _steps(req, traffic), traffic.ignore_eos
        ),
        layouts=tuple(layouts),
        vllm={"version": api.version, "distribution": api.distribution, "scheduler": _scheduler_class(layouts)},
        wall_s=time.monotonic() - t0,
        notes=tuple(notes),
    )


def forecast_layout(
    req: ForecastRequest,
    preq: PlanRequest,
    traffic: Traffic,
    calibrated: StepTimeModel | None,
    budget: Budget,
    vllm_version: str,
) -> LayoutForecast:
    """One layout: its plan, its step-time model (the calibration, else its roofline) and its rungs."""
    try:
        p = _plan(req, preq, vllm_version)
    except (InputError, UsageError) as err:
        if not req.layouts:
            raise
        return _not_loading(preq, err)
    return _layout(req, p, traffic, calibrated or roofline(p), budget)


def _check_request(req: ForecastRequest) -> None:
    if not req.concurrency:
        raise UsageError("--concurrency needs at least one value, e.g. 1,2,4,8")
    bad = [c for c in req.concurrency if not 1 <= c <= MAX_CONCURRENCY]
    if bad:
        raise UsageError(f"--concurrency {bad[0]} is outside 1..{MAX_CONCURRENCY:,}")
    if req.sessions is not None and not 1 <= req.sessions <= MAX_CONCURRENCY:
        raise UsageError(f"--sessions {req.sessions} is outside 1..{MAX_CONCURRENCY:,}")
    if req.window_s < 0 or (req.window_s and not req.sessions):
        raise UsageError("--window needs --sessions and a duration of 0 or more")
    if req.step_time not in STEP_TIME_MODELS:
        raise UsageError(f"--step-time {req.step_time!r}: use one of {', '.join(STEP_TIME_MODELS)}")
    if req.step_time == "calibrated" and not req.calibrate_run:
        raise UsageError("--step-time calibrated needs --calibrate RUN_FOLDER")
    if req.max_steps < 1 or req.time_limit_s <= 0:
        raise UsageError("--max-steps and --time-limit must be positive")


def _plan(req: ForecastRequest, preq: PlanRequest, vllm_version: str) -> Plan:
    # Plan with the accounting of the vLLM whose scheduler runs, unless told otherwise.
    p = plan(preq if preq.vllm_version else replace(preq, vllm_version=minor_of(vllm_version)))
    if not p.fits_load:
        raise InputError(
            f"{p.model.name} does not load on {p.layout.label} x {p.gpu.name}: the plan leaves no KV cache "
            f"({p.per_gpu_gib()['kv_cache_gib']} GiB)",
            hint="run `oomkit plan` with the same options for the memory breakdown and levers",
        )
    if not p.capacity.fits_one_request:
        est = p.capacity.estimated_max_model_len
        raise InputError(
            f"the KV pool ({p.capacity.num_blocks} blocks of {p.kv.block_size} tokens) cannot hold one request of "
            f"max_model_len {p.settings['max_model_len']}: vLLM would refuse to start"
            + (f" (its estimated maximum length: {est})" if est else ""),
            hint="lower --max-model-len or give the pool more memory",
        )
    return p


def _not_loading(preq: PlanRequest, err: InputError | UsageError) -> LayoutForecast:
    layout = Layout(tp=preq.tp or 1, pp=preq.pp or 1, dp=preq.dp or 1, ep=preq.ep)
    return LayoutForecast(
        layout=layout.label,
        engines=preq.dp or 1,
        plan=PlanSummary(model=preq.model, gpu=preq.gpu, gpus=preq.gpus),
        engine=None,
        rungs=(),
        knee=Knee(None, "does_not_load", None),
        error=err.one_line(),
    )


def _scheduler_class(layouts: list[LayoutForecast]) -> str:
    return next(lay.scheduler for lay in layouts if lay.scheduler)


def _steps(req: ForecastRequest, traffic: Traffic) -> int:
    k = traffic.steps_per_session()
    return max(1, min(req.steps_per_session or k, k))


def _layout(req: ForecastRequest, p: Plan, traffic: Traffic, model: StepTimeModel, budget: Budget) -> LayoutForecast:
    lanes = [Lane(i, build_engine(p, req.prefix_cache_retention_interval)) for i in range(p.layout.dp)]
    router = DpRouter(len(lanes))
    lockstep = len(lanes) > 1 and p.model.moe is not None
    head = shared_head(traffic)

    def rung(c: int, now_s: float, spread_s: float = 0.0) -> Rung:
        steps = _steps(req, traffic)
        return Rung(lanes, router, lockstep, traffic, model, head, c, steps, req.slos, now_s, spread_s)

    # The ladder reaches its rungs on a server that has just run session 0's steps and the history
    # doubling: the same warm-up here, unrecorded, so the prefix cache starts as it does there.
    now_s = warm_up(lanes, router, lockstep, traffic, model, head, _steps(req, traffic), budget)
    done: dict[int, RungForecast] = {}

    def run(c: int) -> RungForecast:
        nonlocal now_s
        r = rung(c, now_s, req.window_s if req.sessions else 0.0)
        done[c] = r.run(budget, f"c{c}")
        now_s = r.now_s
        return done[c]

    levels = (req.sessions,) if req.sessions else tuple(sorted(set(req.concurrency)))
    for c in levels:
        if run(c).verdict in ("failure", "cut"):
            break
    if req.refine and not req.sessions:
        _bisect(done, run)
    rungs = [done[c] for c in sorted(done)]
    engine = lanes[0].engine
    return LayoutForecast(
        layout=p.layout.label,
        engines=len(lanes),
        plan=_plan_summary(p, engine),
        engine=engine.settings,
        rungs=tuple(rungs),
        knee=knee_of(rungs),
        notes=tuple(_layout_notes(p, engine, lockstep)),
        step_time=model,
        scheduler=engine.scheduler_class,
    )


def _bisect(done: dict[int, RungForecast], run: Callable[[int], RungForecast]) -> None:
    """Between the highest good rung below the first bad one and that bad one, as the ladder does."""
    while True:
        knee = knee_of(list(done.values()))
        if knee.concurrency is None or knee.reason == "failure":
            return
        lo = knee.last_good or 0
        if knee.concurrency - lo <= 1:
            return
        if run((lo + knee.concurrency) // 2).verdict == "cut":
            return


def _plan_summary(p: Plan, engine: Engine) -> PlanSummary:
    return PlanSummary(
        model=p.model.name,
        gpu=p.gpu.name,
        gpus=p.layout.gpus,
        vllm_accounting=".".join(str(x) for x in p.behaviour.version),
        num_blocks=p.capacity.num_blocks,
        block_size=p.kv.block_size,
        kv_cache_tokens=p.capacity.kv_cache_tokens,
        vllm_kv_cache_tokens=engine.vllm_kv_cache_tokens,
        kv_groups=list(engine.group_kinds),
        scheduler_block_size=engine.scheduler_block_size,
        hash_block_size=engine.hash_block_size,
    )


def _layout_notes(p: Plan, engine: Engine, lockstep: bool) -> list[str]:
    notes = [
        "the prefix cache starts warm with session 0's steps and its last step's history doubled, as the "
        "ladder's rungs start after its agent_steps and history_doubling"
    ]
    if engine.vllm_kv_cache_tokens != p.capacity.kv_cache_tokens:
        notes.append(
            f"vLLM's own capacity for this KV config is {engine.vllm_kv_cache_tokens:,} tokens, the plan says "
            f"{p.capacity.kv_cache_tokens:,}: the plan's formula and the installed vLLM differ"
        )
    if p.layout.dp > 1:
        notes.append(
            f"{p.layout.dp} DP engines, one vLLM scheduler each, behind vLLM's DP router (DPLBAsyncMPClient: "
            "least max(in-flight, waiting + running) + a KV-pressure penalty on waiting, 100 ms stats); figures "
            "are for the deployment: sums over engines, max KV usage of the fullest engine"
            + ("; MoE engines step in lockstep (a step lasts as long as the slowest rank's)" if lockstep else "")
        )
    if p.layout.pp > 1:
        notes.append("PP: the scheduler runs as one stage (batches in flight sized as the plan assumed)")
    if p.model.vision:
        notes.append("text-only traffic: the vision encoder's cache and budget are not driven")
    return notes
