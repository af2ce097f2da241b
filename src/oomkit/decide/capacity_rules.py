"""Rules that judge capacity on a working setup: one target request, the team's own criteria, the
concurrency that holds against the target with reserve, and the fallback when nothing could be judged."""

from __future__ import annotations

import math

from oomkit.compare.document import ModeDoc
from oomkit.decide.checklist import hit_rate_compared
from oomkit.decide.documents import number
from oomkit.decide.evidence import RunEvidence
from oomkit.decide.facts import Capacity, DecisionFacts, Facts, Measured
from oomkit.decide.fired import Ctx, Fired, cited
from oomkit.decide.model import DONE, FAILED, EvidenceDoc, Numbers, Verdict
from oomkit.decide.teams import first_open
from oomkit.decide.topology import engines_needed, gpus_used, topology_or_expand
from oomkit.fsio import json_object
from oomkit.serial import JsonObject

SERVING_OOM = ("serving_prefill", "serving_decode", "cache_pressure")
# Modes whose win changes the business scenario: a temporary degradation, not a fix.
DEGRADING = {
    "history_turns": "the agent sees less history",
    "output_tokens": "answers are cut shorter",
    "concurrency": "fewer dialogs are served",
    "max_model_len": "long dialogs are refused",
}


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
            cited(run.path, fail.get("evidence", [])[:3]),
            tuple(recs),
        )
    limit = number(ctxt.get("limit_tokens"))
    if ctxt.get("found") and limit and limit < f.req.longest_request_tokens():
        return _refused_by_context(f, run, ctxt, limit)
    largest = number(ctxt.get("largest_ok_prompt_tokens"))
    if largest is not None and largest < need_in and not ctxt.get("found") and hist and not hist["ok"]:
        verdict, numbers, recs = topology_or_expand(f)
        return Fired(
            verdict, f"a request of {largest} tokens passed but the required {need_in} failed", numbers, (), tuple(recs)
        )
    return None


def _refused_by_context(f: DecisionFacts, run: RunEvidence, ctxt: JsonObject, limit: float) -> Fired:
    """The ladder found the context limit below the longest required request: raising max_model_len is
    a tuning fix only when the KV pool can hold that request; otherwise the layout is too small."""
    pool = number(f.figures().get("kv_cache_tokens"))
    need = f.req.longest_request_tokens()
    numbers: Numbers = {"context_limit_tokens": limit, "longest_request_tokens": need, "kv_cache_tokens": pool}
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


def _headroom_numbers(f: DecisionFacts, cap: Capacity) -> Numbers:
    """The figures every concurrency verdict shows, whichever branch it takes."""
    t, need, c = f.req.concurrent_dialogs, f.req.target_with_reserve(), cap.last_good
    return {
        "target_concurrency": t,
        "target_with_reserve": need,
        "reserve_pct": f.req.peak_reserve_pct,
        "capacity_concurrency": c,
        "first_bad_concurrency": cap.first_bad,
        "max_tested": cap.max_tested,
        "headroom_pct": None if c is None else round((c - t) / t * 100, 1),
        "engines_needed": engines_needed(need, c),
        "gpus_per_engine": gpus_used(f.profile_args()),
    }


def _level_evidence(cap: Capacity) -> tuple[EvidenceDoc, ...]:
    """The last level that held and the first that failed; the failures alone when neither is known."""
    levels: list[EvidenceDoc] = [
        {"source": p.source, "concurrency": p.concurrency, "ok": p.ok, "why": p.why}
        for p in cap.points
        if p.concurrency in (cap.last_good, cap.first_bad)
    ]
    bad = [p for p in cap.points if not p.ok][:3]
    failing: list[EvidenceDoc] = [{"source": p.source, "why": p.why} for p in bad]
    return tuple(levels[:4] or failing)


def concurrency(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    cap = f.capacity()
    if not cap.points:
        return None
    t, need, c = f.req.concurrent_dialogs, f.req.target_with_reserve(), cap.last_good
    numbers = _headroom_numbers(f, cap)
    ev = _level_evidence(cap)
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
            f"(+{numbers['headroom_pct']}%) covers the {f.req.peak_reserve_pct:g}% reserve",
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
    return _short_of_target(f, cap, numbers, ev, degraded)


def _short_of_target(
    f: DecisionFacts, cap: Capacity, numbers: Numbers, ev: tuple[EvidenceDoc, ...], degraded: list[str]
) -> Fired:
    """No setting holds the target: lower concurrency now, and expand by the count the held level gives."""
    t, need, c = f.req.concurrent_dialogs, f.req.target_with_reserve(), cap.last_good
    bad = [p for p in cap.points if not p.ok][:3]
    now = f"lower concurrency to {int(c)} now and measure headroom" if c else "even one dialog at a time fails"
    why = (
        f"headroom at the target is {numbers['headroom_pct']}%, below the {f.req.peak_reserve_pct:g}% reserve"
        if c is not None and c >= t
        else f"only {c if c is not None else 0:g} of {t} concurrent dialogs hold"
    )
    engines, per_engine = numbers["engines_needed"], numbers["gpus_per_engine"]
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
