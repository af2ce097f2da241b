"""The decision rules, in the method's order: the first that fires gives the verdict. Each rule
returns the numbers behind it and the evidence (files, lines, metric deltas)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from oomkit.compare.document import ModeDoc
from oomkit.decide.checklist import Item, hit_rate_compared
from oomkit.decide.documents import LaunchVerdict, SourceEvidence, StepDoc, StepFailure, number
from oomkit.decide.evidence import RunEvidence
from oomkit.decide.facts import ENV_PHASES, LOAD_PHASES, DecisionFacts, Facts, Measured
from oomkit.decide.model import DONE, FAILED, EvidenceDoc, Numbers, Verdict
from oomkit.decide.teams import Team, first_open
from oomkit.decide.topology import engines_needed, gpus_used, topology_or_expand
from oomkit.fsio import json_object

SERVING_OOM = ("serving_prefill", "serving_decode", "cache_pressure")
# Modes whose win changes the business scenario: a temporary degradation, not a fix.
DEGRADING = {
    "history_turns": "the agent sees less history",
    "output_tokens": "answers are cut shorter",
    "concurrency": "fewer dialogs are served",
    "max_model_len": "long dialogs are refused",
}


@dataclass(frozen=True)
class Fired:
    verdict: Verdict
    summary: str
    numbers: Numbers = field(default_factory=Numbers)
    evidence: tuple[EvidenceDoc, ...] = ()
    recommendations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ctx:
    team: Team
    criteria: list[Item]


def _cited(run_path: str, evidence: list[SourceEvidence]) -> tuple[EvidenceDoc, ...]:
    """A failure's evidence, each piece with the run folder it was recorded in."""
    return tuple([{"run": run_path, **e} for e in evidence])


def _lines(run_path: str, verdict: LaunchVerdict) -> tuple[EvidenceDoc, ...]:
    return tuple(
        {"run": run_path, "file": e.get("file"), "line": e.get("line"), "text": e.get("text")}
        for e in (verdict.get("evidence") or [])[:4]
    )


def environment(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    failed = f.failed_launches(ENV_PHASES)
    rows = [r for r in (f.recipe_check.rows if f.recipe_check else ()) if r.status == "fail"]
    if not failed and not rows:
        return None
    ev = tuple(e for r, v in failed for e in _lines(r.path, v))
    ev += tuple(EvidenceDoc(recipe_row=r.requirement, found=r.found, why=r.why) for r in rows[:4])
    what = failed[0][1].get("summary") if failed else f"{len(rows)} recipe row(s) fail: {rows[0].requirement}"
    return Fired(
        "fix_environment",
        f"the environment does not match: {what}",
        {"failed_starts": len(failed), "recipe_rows_failed": len(rows)},
        ev,
        ("fix the image, driver, command or variables first; capacity is not judged on a broken environment",),
    )


def _failed_steps(f: Facts) -> list[tuple[RunEvidence, StepDoc, StepFailure]]:
    run, lad = f.ladder()
    if run is None or lad is None:
        return []
    return [(run, s, fail) for s in lad.get("steps", []) if (fail := s.get("failure"))]


def setup_rejects(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    for run, s, fail in _failed_steps(f):
        if fail.get("kind") == "bad_request":
            text = next((e.get("text") for e in fail.get("evidence", []) if e.get("text")), fail.get("reason"))
            return Fired(
                "fix_environment",
                f"the server's launch command rejects what the workload sends (ladder step {s['name']}): {text}",
                {"step": s["name"], "error_kind": "bad_request"},
                ({"run": run.path, "file": run.file("requests.jsonl"), "text": text},),
                (
                    "add the missing server flag to the profile (e.g. --enable-auto-tool-choice "
                    "--tool-call-parser for tool calls), then measure again",
                ),
            )
    return None


def not_memory(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    """A failure the log says is not a memory error: fix the software or the request first."""
    for run, s, fail in _failed_steps(f):
        if fail.get("phase") == "not_oom_other" and fail.get("kind") != "context_length":
            ev = _cited(run.path, fail.get("evidence", [])[:4])
            return Fired(
                "fix_environment",
                f"ladder step {s['name']} failed, and not for memory: {fail.get('reason')}",
                {"step": s["name"], "error_kind": fail.get("kind"), "phase": "not_oom_other"},
                ev,
                (
                    "this is a software or request problem (vLLM build, parser, sampling options): fix it or "
                    "work around it, then measure capacity again",
                ),
            )
    for r, v in f.failed_launches(("not_oom_other",)):
        return Fired(
            "fix_environment",
            f"the server did not start, and not for memory: {v.get('summary')}",
            {"phase": "not_oom_other"},
            _lines(r.path, v),
            ("fix the start command or the image first",),
        )
    return None


def load_phase(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    failed = [(r, v) for r, v in f.failed_launches(LOAD_PHASES) if v.get("is_oom")]
    if not failed:
        return None
    run, v = failed[0]
    verdict, numbers, recs = topology_or_expand(f)
    weights_gib = number((run.manifest.get("figures") or {}).get("model_weights_gib"))
    return Fired(
        verdict,
        f"out of memory while {v['phase'].replace('_', ' ')} on a verified environment: "
        f"the model does not fit this layout ({v.get('summary')})",
        {"phase": v.get("phase"), "model_weights_gib": weights_gib, **numbers},
        _lines(run.path, v),
        tuple(recs) + ("do not lower max_num_seqs: it does not change load-phase memory",),
    )


def graph_capture(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    failed = f.failed_launches(("cudagraph_capture",))
    if not failed:
        return None
    run, v = failed[0]
    return Fired(
        "tune",
        f"out of memory in CUDA graph capture: {v.get('summary')}",
        {"phase": "cudagraph_capture"},
        _lines(run.path, v),
        (
            "leave margin for the graphs: lower gpu_memory_utilization a little, or "
            "capture fewer sizes (max_cudagraph_capture_size), or enforce_eager",
        ),
    )


def kv_startup(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    failed = f.failed_launches(("kv_cache_allocation",))
    if not failed:
        return None
    run, v = failed[0]
    est = number((run.manifest.get("figures") or {}).get("estimated_max_model_len"))
    need = f.req.longest_request_tokens()
    numbers: Numbers = {"estimated_max_model_len": est, "longest_request_tokens": need}
    if est is not None and est >= need:
        return Fired(
            "tune",
            f"one request of max_model_len does not fit the KV pool, but the requirement's longest "
            f"request ({need} tokens) does (vLLM estimates {est})",
            numbers,
            _lines(run.path, v),
            (f"set max_model_len to {need} (vLLM's estimate of what fits: {est})",),
        )
    verdict, more, recs = topology_or_expand(f)
    short = f"{need / est:.2f}x" if est else "unknown"
    return Fired(
        verdict,
        f"the KV pool cannot hold one request of the required {need} tokens (vLLM estimates "
        f"{est}): KV memory short by {short}",
        {**numbers, **more},
        _lines(run.path, v),
        tuple(recs),
    )


def one_request(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    run, lad = f.ladder()
    if run is None or lad is None:
        return None
    need_in = f.req.input_tokens.max
    short = f.step("short_request")
    hist = f.step("history_doubling")
    ctxt = json_object(hist["detail"].get("context")) if hist else {}
    fail = (short.get("failure") if short else None) or (hist.get("failure") if hist else None)
    if fail and (fail.get("phase") in SERVING_OOM or fail.get("kind") == "engine_dead"):
        verdict, numbers, recs = topology_or_expand(f)
        return Fired(
            verdict,
            f"one request fails in a clean environment ({fail.get('reason')}): capacity or topology, not concurrency",
            {**numbers, "phase": fail.get("phase")},
            _cited(run.path, fail.get("evidence", [])[:3]),
            tuple(recs),
        )
    limit = number(ctxt.get("limit_tokens"))
    if ctxt.get("found") and limit and limit < f.req.longest_request_tokens():
        pool = number(f.figures().get("kv_cache_tokens"))
        need = f.req.longest_request_tokens()
        numbers = {"context_limit_tokens": limit, "longest_request_tokens": need, "kv_cache_tokens": pool}
        ev: tuple[EvidenceDoc, ...] = (
            {"run": run.path, "file": run.file("ladder.json"), "key": "history_doubling.context", "value": ctxt},
        )
        if pool and pool >= need:
            return Fired(
                "tune",
                f"the required {need}-token request is refused by max_model_len {limit}, and the "
                f"KV pool ({pool} tokens) holds it",
                numbers,
                ev,
                (f"raise max_model_len to {need}",),
            )
        verdict, more, recs = topology_or_expand(f)
        return Fired(
            verdict,
            f"the required {need}-token request does not fit (context limit {limit}, KV pool {pool} tokens)",
            {**numbers, **more},
            ev,
            tuple(recs),
        )
    largest = number(ctxt.get("largest_ok_prompt_tokens"))
    if largest is not None and largest < need_in and not ctxt.get("found") and hist and not hist["ok"]:
        verdict, numbers, recs = topology_or_expand(f)
        return Fired(
            verdict, f"a request of {largest} tokens passed but the required {need_in} failed", numbers, (), tuple(recs)
        )
    return None


def team_gate(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    """The team's own criteria: unmet ones stop the decision; research asks nothing more."""
    items = ctx.criteria
    if not ctx.team.capacity:
        blocked = first_open(items)
        if blocked is None:
            return Fired(
                "tune",
                f"{ctx.team.name}: {ctx.team.asks} - all met; capacity is not judged for this team",
                {"criteria_done": len(items)},
                (),
                ("keep the setup; measure capacity when the team changes",),
            )
        return Fired(
            "inconclusive",
            f"{ctx.team.name}: criterion not met: {blocked.title} ({blocked.status}: {blocked.detail})",
            {"criterion": blocked.key},
            tuple({"criterion": i.to_dict()} for i in items if i.status != DONE),
        )
    if ctx.team.order_matters:
        blocked = next((i for i in items[:-1] if i.status != DONE), None)
        if blocked:
            verdict: Verdict = "fix_environment" if blocked.status == FAILED else "inconclusive"
            return Fired(
                verdict,
                f"platform check {items.index(blocked) + 1} of {len(items)} not passed: "
                f"{blocked.title} ({blocked.status}: {blocked.detail})",
                {"check": blocked.key},
                ({"criterion": blocked.to_dict()},),
                (f"do '{blocked.title}' before the next check",),
            )
        return None
    gate = [i for i in items if i.status != DONE and i.key not in ("target_concurrency", "reserve")]
    if ctx.team.name in ("poc", "agent") and gate:
        return Fired(
            "inconclusive",
            f"{ctx.team.name}: not established: " + ", ".join(f"{i.title} ({i.status})" for i in gate),
            {"criteria_open": [i.key for i in gate]},
            tuple([{"criterion": i.to_dict()} for i in gate]),
        )
    return None


def _tuning_fix(f: Facts, target: int) -> tuple[ModeDoc | None, list[str]]:
    """A compared mode that holds at the target where the baseline does not; and degrading wins."""
    crun, comp = f.compare()
    degraded: list[str] = []
    base = [p for p in f.points() if "cell baseline" in p.source and p.concurrency >= target]
    if comp is None or not base or all(p.ok for p in base):
        return None, degraded
    for mode in comp["modes"]:
        cells = f.mode_cells(mode["name"])
        if mode["name"] in ("baseline", "lower-concurrency") or not cells:
            continue
        good = all(f._judge(Measured.of(c["concurrency"], c), "", {}).ok for c in cells)
        if not good or cells[0]["concurrency"] < target:
            continue
        if mode["factor"] in DEGRADING:
            degraded.append(
                f"{mode['name']} ({mode['factor']} {mode['value']}) holds the target but "
                f"{DEGRADING[mode['factor']]}: a temporary degradation, not a fix"
            )
            continue
        if mode["factor"] == "enable_prefix_caching" and mode["value"] is False and not hit_rate_compared(f):
            continue  # never recommended without the hit-rate comparison
        return mode, degraded
    return None, degraded


def concurrency(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    cap = f.capacity()
    if not cap.points:
        return None
    t, need = f.req.concurrent_dialogs, f.req.target_with_reserve()
    c = cap.last_good
    headroom = None if c is None else round((c - t) / t * 100, 1)
    per_engine = gpus_used(f.profile_args())
    engines = engines_needed(need, c)
    numbers: Numbers = {
        "target_concurrency": t,
        "target_with_reserve": need,
        "reserve_pct": f.req.peak_reserve_pct,
        "capacity_concurrency": c,
        "first_bad_concurrency": cap.first_bad,
        "max_tested": cap.max_tested,
        "headroom_pct": headroom,
        "engines_needed": engines,
        "gpus_per_engine": per_engine,
    }
    bad = [p for p in cap.points if not p.ok][:3]
    levels: list[EvidenceDoc] = [
        {"source": p.source, "concurrency": p.concurrency, "ok": p.ok, "why": p.why}
        for p in cap.points
        if p.concurrency in (c, cap.first_bad)
    ]
    failing: list[EvidenceDoc] = [{"source": p.source, "why": p.why} for p in bad]
    ev = tuple(levels[:4] or failing)
    if cap.first_bad is None and (c or 0) < need:
        return Fired(
            "inconclusive",
            f"no level failed, but load was measured only up to {cap.max_tested:g} "
            f"concurrent dialogs, below the target with reserve ({need:g})",
            numbers,
            ev,
            (f"measure up to {math.ceil(need)} (oomkit ladder --max-concurrency {math.ceil(need)})",),
        )
    if c is not None and c >= need:
        return Fired(
            "tune",
            f"the target holds with headroom: {c:g} concurrent dialogs hold, target {t} "
            f"(+{headroom}%) covers the {f.req.peak_reserve_pct:g}% reserve",
            numbers,
            ev,
            (f"cap max_num_seqs at {int(c)} and keep this layout; re-measure after each change",),
        )
    fix, degraded = _tuning_fix(f, t)
    if fix:
        return Fired(
            "tune",
            f"the target does not hold as configured ({cap.first_bad:g} fails), but "
            f"{fix['name']} ({fix['factor']} {fix['value']}) holds it in the same cells",
            numbers,
            ev,
            (f"set {fix['factor']} to {fix['value']} and re-measure headroom at {math.ceil(need)}",),
        )
    now = f"lower concurrency to {int(c)} now and measure headroom" if c else "even one dialog at a time fails"
    why = (
        f"headroom at the target is {headroom}%, below the {f.req.peak_reserve_pct:g}% reserve"
        if c is not None and c >= t
        else f"only {c if c is not None else 0:g} of {t} concurrent dialogs hold"
    )
    recs = [now, _expand_advice(f, engines, per_engine, need)] + degraded
    return Fired(
        "expand",
        f"{why}: the first failing level is {cap.first_bad:g} ({bad[0].why if bad else ''})",
        numbers,
        ev,
        tuple(recs),
    )


def _expand_advice(f: Facts, engines: int | None, gpus_per_engine: int, need: float) -> str:
    """How many replicas of this server the target with reserve needs; without a level that held,
    there is no count to give."""
    if not engines:
        return "expand: more KV memory per replica (see oomkit plan --compare)"
    gpus = (
        f"{engines * gpus_per_engine} GPU(s) at {gpus_per_engine} per replica"
        if (f.env_snapshot() or {}).get("gpus")
        else "the CPU backend here: count GPUs on the serving node"
    )
    return f"expand to {engines} replica(s) of this server ({gpus}) for {math.ceil(need)} dialogs"


def fallback(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    have = [
        k
        for k, v in (
            ("launch", f.launches),
            ("ladder", f.ladders),
            ("compare", f.compares),
            ("bench", f.benches),
            ("import", f.imports),
        )
        if v
    ]
    return Fired(
        "inconclusive",
        "the runs do not show the target load: nothing to judge capacity on",
        {"evidence_kinds": have},
        (),
        ("run oomkit investigate PROFILE --requirements R.yaml",),
    )


@dataclass(frozen=True)
class Rule:
    id: str
    says: tuple[Verdict, ...]
    check: Callable[[DecisionFacts, Ctx], Fired | None]
    text: str
    source: str


RULES: tuple[Rule, ...] = (
    Rule(
        "environment_mismatch",
        ("fix_environment",),
        environment,
        "an environment mismatch comes first",
        "the method; triage phases environment/network_communication",
    ),
    Rule(
        "setup_rejects_requests",
        ("fix_environment",),
        setup_rejects,
        "a request the workload needs is refused by the launch command",
        "ladder failure kind bad_request",
    ),
    Rule(
        "not_a_memory_failure",
        ("fix_environment",),
        not_memory,
        "a failure that is not an OOM is fixed before capacity is judged",
        "the method (hard negatives: not every crash is an OOM); triage phase not_oom_other",
    ),
    Rule(
        "load_phase_oom",
        ("change_topology", "expand"),
        load_phase,
        "a load-phase OOM on a verified environment means topology or expansion",
        "the method; triage advice",
    ),
    Rule(
        "graph_capture_oom", ("tune",), graph_capture, "graph capture OOM is a margin setting", "vllm-internals.md §3"
    ),
    Rule(
        "kv_pool_below_one_request",
        ("tune", "change_topology", "expand"),
        kv_startup,
        "max_model_len against the KV pool, with vLLM's own estimate",
        "cpu-testbed.md §1",
    ),
    Rule(
        "one_target_request_fails",
        ("tune", "change_topology", "expand"),
        one_request,
        "one target request failing in a clean environment means capacity or topology",
        "the method",
    ),
    Rule(
        "team_criteria",
        ("tune", "inconclusive", "fix_environment"),
        team_gate,
        "the team's criteria from the choice matrix",
        "the method's choice matrix",
    ),
    Rule(
        "concurrency_headroom",
        ("tune", "expand", "inconclusive"),
        concurrency,
        "one passing and several failing means lower concurrency and measure headroom; expand if the headroom "
        "at the target is below the reserve",
        "the method",
    ),
    Rule("not_enough_evidence", ("inconclusive",), fallback, "no rule could judge the evidence", "oomkit"),
)


def apply(f: DecisionFacts, ctx: Ctx) -> tuple[Rule, Fired]:
    for rule in RULES:
        if rule.id == "concurrency_headroom" and not ctx.team.capacity:
            continue
        fired = rule.check(f, ctx)
        if fired is not None:
            return rule, fired
    raise AssertionError("the fallback rule always fires")
