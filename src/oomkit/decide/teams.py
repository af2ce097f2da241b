"""The method's choice matrix by team type: what each team must see before the verdict counts.
Criteria are Items (done / missing / failed) in the order the team checks them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oomkit.decide.checklist import Item
from oomkit.decide.documents import number, whole
from oomkit.decide.facts import DecisionFacts, Facts
from oomkit.decide.model import DONE, FAILED, MISSING, Status
from oomkit.units import fmt_pct


@dataclass(frozen=True)
class Team:
    name: str
    asks: str
    capacity: bool
    """Whether the requirement's concurrency, headroom and reserve are judged for this team."""
    order_matters: bool
    """Platform teams stop at the first check not done."""
    criteria: tuple[str, ...]
    source: str


def _step(f: Facts, name: str, title: str) -> Item:
    s = f.step(name)
    run, _ = f.ladder()
    if s is None or run is None:
        return Item(name, title, MISSING, f"ladder step {name} not run")
    reason = (s.get("failure") or {}).get("reason") or "; ".join(s.get("notes") or []) or "ok"
    return Item(name, title, DONE if s["ok"] else FAILED, reason, (run.file("ladder.json"),))


def _poc(f: Facts, key: str, title: str) -> Item:
    poc = f.poc()
    run, _ = f.ladder()
    if poc is None or run is None:
        return Item(key, title, MISSING, "no ladder (poc.json) among the runs")
    value = poc.get(key)
    ok = bool(value) if key != "knee" else value is not None
    return Item(key, title, DONE if ok else FAILED, f"{key} = {value}", (run.file("poc.json"),))


def _started(f: Facts) -> Item:
    ready = f.ready_launches()
    if ready:
        return Item(
            "starts",
            "the server starts",
            DONE,
            f"ready in {ready[0].manifest.get('ready_s')} s",
            (ready[0].file("manifest.json"),),
        )
    return Item("starts", "the server starts", FAILED if f.launches else MISSING, "no launch became ready")


def _comparisons(f: Facts) -> Item:
    crun, comp = f.compare()
    title = "cache-vs-context comparisons"
    if crun is None or comp is None:
        return Item("comparisons", title, MISSING, "no comparison (oomkit compare --preset cache-vs-context)")
    names = {m["name"] for m in comp["modes"]}
    skipped = [n for n in comp.get("notes", []) if "skipped" in n]
    want = {"lower-concurrency", "shorter-history", "retention"}
    missing = sorted(want - names)
    unexplained = [m for m in missing if not any(m.split("-")[0] in s or "retention" in s for s in skipped)]
    if unexplained:
        return Item(
            "comparisons", title, MISSING, f"modes not compared: {', '.join(unexplained)}", (crun.file("compare.json"),)
        )
    rates = {c["mode"]: c.get("prefix_cache_hit_rate") for c in comp["cells"]}
    return Item(
        "comparisons",
        title,
        DONE,
        f"modes {', '.join(sorted(names))}; hit rate per mode: "
        + ", ".join(f"{mode} {fmt_pct(rate)}" for mode, rate in rates.items())
        + (f"; {'; '.join(skipped)}" if skipped else ""),
        (crun.file("compare.json"),),
    )


def _snapshot(f: Facts) -> Item:
    snap = f.env_snapshot()
    if snap is None:
        return Item("nvidia_smi", "nvidia-smi snapshot", MISSING, "no environment snapshot")
    gpus = snap.get("gpus") or []
    return Item(
        "nvidia_smi",
        "nvidia-smi snapshot",
        DONE if gpus else MISSING,
        f"{len(gpus)} GPU(s)" if gpus else f"no GPU: {snap.get('gpu_note')}",
    )


def _cuda13(f: Facts) -> Item:
    sw = (f.env_snapshot() or {}).get("software") or {}
    flavour = sw.get("cuda_flavour")
    if not flavour:
        return Item("cuda13", "CUDA 13 in the container", MISSING, "build flavour unknown")
    return Item(
        "cuda13",
        "CUDA 13 in the container",
        DONE if flavour.startswith("cu13") else FAILED,
        f"vLLM/torch build: {flavour}",
    )


def _recipe(f: Facts) -> Item:
    if not f.recipe_check:
        return Item("recipe", "hardware vs recipe", MISSING, "no recipe check (oomkit decide --recipe RECIPE.yaml)")
    return Item(
        "recipe",
        "hardware vs recipe",
        DONE if f.recipe_check.overall == "pass" else FAILED,
        f"recipe {f.recipe_check.recipe}: {f.recipe_check.overall}",
    )


def _one_node(f: Facts) -> Item:
    s = f.step("short_request")
    ready = f.ready_launches()
    ok = bool(ready) and bool(s and s["ok"])
    return Item(
        "one_node",
        "one node without agent load",
        DONE if ok else (FAILED if ready else MISSING),
        "ready and a short request answered" if ok else "not shown",
    )


def _inter_node(f: Facts) -> Item:
    args = f.profile_args()
    if (
        whole(args.get("pipeline_parallel_size"), 1) == 1
        and whole(args.get("data_parallel_size"), 1) == 1
        and "nnodes" not in args
    ):
        return Item("inter_node", "inter-node test", DONE, "not applicable: one node")
    return Item("inter_node", "inter-node test", MISSING, "a multi-node layout needs an inter-node test")


def _api_route(f: Facts) -> Item:
    via_url = [lad for _, lad in f.with_ladder if not (lad.get("target") or {}).get("launched", True)]
    if via_url:
        return Item(
            "api_route",
            "short request through the future API route",
            DONE,
            f"ladder through {via_url[0]['target'].get('base_url')}",
        )
    return Item(
        "api_route",
        "short request through the future API route",
        MISSING,
        "measured on the server oomkit started: run oomkit ladder --url <the API route>",
    )


def _target(f: DecisionFacts) -> Item:
    cap = f.capacity()
    t = f.req.concurrent_dialogs
    if cap.last_good is None and cap.first_bad is None:
        return Item("target_concurrency", "target concurrency", MISSING, "no load measured")
    ok = cap.last_good is not None and cap.last_good >= t
    return Item(
        "target_concurrency", "target concurrency", DONE if ok else FAILED, f"holds up to {cap.last_good}, target {t}"
    )


def _headroom(f: DecisionFacts) -> Item:
    cap = f.capacity()
    need = f.req.target_with_reserve()
    if cap.last_good is None and cap.first_bad is None:
        return Item("reserve", "headroom at the target covers the reserve", MISSING, "no load measured")
    ok = cap.last_good is not None and cap.last_good >= need
    return Item(
        "reserve",
        "headroom at the target covers the reserve",
        DONE if ok else FAILED,
        f"holds up to {cap.last_good}; target with {f.req.peak_reserve_pct:g}% reserve {need:g}",
    )


def _recovery(f: DecisionFacts) -> Item:
    ready_s = [float(s) for r in f.ready_launches() if (s := r.manifest.get("ready_s"))]
    if not ready_s:
        return Item("recovery", "restart within the recovery time", MISSING, "no measured start")
    worst = max(ready_s)
    ok = worst <= f.req.recovery_time_s
    return Item(
        "recovery",
        "restart within the recovery time",
        DONE if ok else FAILED,
        f"slowest start {worst:.1f} s, allowed {f.req.recovery_time_s:g} s",
    )


def _image_headroom(f: DecisionFacts) -> Item:
    snap = f.env_snapshot() or {}
    peaks = [peak for p in f.capacity().points if (peak := number(p.figures.get("peak_memory_bytes")))]
    gpus = snap.get("gpus") or []
    total = sum(g.get("memory_total_bytes") or 0 for g in gpus) or (snap.get("host") or {}).get("ram_total_bytes")
    if not peaks or not total:
        return Item("image_headroom", "memory headroom for image updates", MISSING, "peak memory or capacity unknown")
    free_pct = (1 - max(peaks) / total) * 100
    where = "GPU memory" if gpus else "host RAM (CPU backend)"
    return Item(
        "image_headroom",
        "memory headroom for image updates",
        DONE if free_pct >= f.req.image_update_headroom_pct else FAILED,
        f"{free_pct:.1f}% of {where} free at peak, {f.req.image_update_headroom_pct:g}% required",
    )


CRITERIA: dict[str, Callable[[DecisionFacts], Item]] = {
    "starts": _started,
    "api_answers": lambda f: _step(f, "short_request", "the API answers"),
    "tools_validate": lambda f: _step(f, "tool_call", "tool calling validates"),
    "reasoning_chain": lambda f: _step(f, "agent_steps", "a basic reasoning chain holds"),
    "short_request_stable": lambda f: _poc(f, "short_request_stable", "short request stable"),
    "tool_calling_valid": lambda f: _poc(f, "tool_calling_valid", "tool calling valid"),
    "repeat_run_identical": lambda f: _poc(f, "repeat_run_identical", "repeat run identical"),
    "context_limit_found": lambda f: _poc(f, "context_limit_found", "context limit found"),
    "peak_memory_recorded": lambda f: _poc(f, "peak_memory_recorded", "peak memory recorded"),
    "knee": lambda f: _poc(f, "knee", "concurrency knee measured"),
    "comparisons": _comparisons,
    "nvidia_smi": _snapshot,
    "cuda13": _cuda13,
    "recipe": _recipe,
    "one_node": _one_node,
    "inter_node": _inter_node,
    "api_route": _api_route,
    "tools": lambda f: _step(f, "tool_call", "tools"),
    "target_concurrency": _target,
    "reserve": _headroom,
    "recovery": _recovery,
    "image_headroom": _image_headroom,
}

TEAMS: dict[str, Team] = {
    t.name: t
    for t in (
        Team(
            "research",
            "the server starts, the API answers, tool calling validates, a basic reasoning chain holds; "
            "nothing more is asked",
            False,
            False,
            ("starts", "api_answers", "tools_validate", "reasoning_chain"),
            "the method's choice matrix: research team",
        ),
        Team(
            "poc",
            "the POC criteria of the ladder",
            True,
            False,
            (
                "short_request_stable",
                "tool_calling_valid",
                "repeat_run_identical",
                "context_limit_found",
                "peak_memory_recorded",
                "knee",
            ),
            "the method's choice matrix: POC team (ladder criteria, poc.json)",
        ),
        Team(
            "agent",
            "the cache-vs-context comparisons",
            True,
            False,
            ("starts", "api_answers", "comparisons"),
            "the method's choice matrix: agent service",
        ),
        Team(
            "platform",
            "the compatibility checks in order",
            True,
            True,
            ("nvidia_smi", "cuda13", "recipe", "one_node", "inter_node", "api_route", "tools", "target_concurrency"),
            "the method's choice matrix: platform team (nvidia-smi, CUDA 13, recipe, one node, inter-node, API "
            "route, tools, then target concurrency)",
        ),
        Team(
            "production",
            "the requirement's headroom and reserve",
            True,
            False,
            ("target_concurrency", "reserve", "image_headroom", "recovery"),
            "the method's choice matrix: production",
        ),
    )
}


def criteria(f: DecisionFacts, team: Team) -> list[Item]:
    return [CRITERIA[name](f) for name in team.criteria]


def first_open(items: list[Item]) -> Item | None:
    return next((i for i in items if i.status != DONE), None)


def summary(items: list[Item]) -> dict[Status, list[str]]:
    return {s: [i.key for i in items if i.status == s] for s in (DONE, MISSING, FAILED)}
