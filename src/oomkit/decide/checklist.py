"""The decision checklist, item by item: done (with its evidence), missing (what to record), or
failed (what contradicts it). Items follow the method's list; each function reads only Facts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oomkit.decide.documents import whole
from oomkit.decide.facts import DecisionFacts, Facts
from oomkit.decide.model import DONE, FAILED, MISSING, ItemDoc, Status
from oomkit.units import fmt_ms, fmt_s


@dataclass(frozen=True)
class Item:
    key: str
    title: str
    status: Status
    detail: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> ItemDoc:
        return {
            "key": self.key,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "evidence": list(self.evidence),
        }


def _phases(f: Facts) -> Item:
    marked = [r for r in f.launches if r.manifest.get("phases")]
    if not f.launches:
        return Item("phases", "phase marked in logs", MISSING, "no server log among the runs (imports only)")
    unknown = [
        r
        for r in f.launches
        if (r.manifest.get("verdict") or {}).get("phase") == "unknown" and not r.manifest.get("ready")
    ]
    if unknown:
        return Item(
            "phases",
            "phase marked in logs",
            FAILED,
            "a failed start whose phase the log does not show",
            tuple(r.file("server.log") for r in unknown),
        )
    last = marked[0].manifest["phases"][-1] if marked else {}
    return Item(
        "phases",
        "phase marked in logs",
        DONE if marked else MISSING,
        f"{len(marked)} launch(es) with a phase timeline; last phase {last.get('phase')}",
        tuple(f"{r.file('server.log')}:{r.manifest['phases'][-1].get('line')}" for r in marked[:3]),
    )


def _initialised(f: Facts) -> Item:
    ready = f.ready_launches()
    if ready:
        r = ready[0]
        return Item(
            "initialised",
            "initialisation completed",
            DONE,
            f"ready after {fmt_s(r.manifest.get('ready_s'))}",
            (r.file("manifest.json"),),
        )
    if f.launches:
        v = f.launches[0].manifest.get("verdict") or {}
        return Item(
            "initialised",
            "initialisation completed",
            FAILED,
            f"did not start: {v.get('phase')}: {v.get('summary')}",
            (f.launches[0].file("server.log"),),
        )
    return Item("initialised", "initialisation completed", MISSING, "no launch among the runs")


def _short_request(f: Facts) -> Item:
    step = f.step("short_request")
    run, _ = f.ladder()
    if step is not None and run is not None:
        why = (
            "answered"
            if step["ok"]
            else f"did not answer well: {(step.get('failure') or {}).get('reason') or step['notes']}"
        )
        return Item(
            "short_request",
            "short request answers",
            DONE if step["ok"] else FAILED,
            f"{why}; TTFT p50 {fmt_ms(step.get('ttft_ms_p50'))}",
            (run.file("ladder.json"),),
        )
    checks = [(r, c) for r in f.launches if (c := r.manifest.get("check_request"))]
    if checks:
        run, c = checks[0]
        return Item(
            "short_request",
            "short request answers",
            DONE if c.get("ok") else FAILED,
            f"launch --check: {c.get('latency_ms')} ms, status {c.get('status')}",
            (run.file("manifest.json"),),
        )
    return Item("short_request", "short request answers", MISSING, "no short request sent (run oomkit ladder)")


def _saved(f: Facts) -> Item:
    if not f.launches:
        return Item("saved", "image/vLLM/driver/command saved", MISSING, "no launch manifest among the runs")
    m = f.launches[0].manifest
    snap = m.get("env_snapshot") or {}
    driver = (snap.get("driver") or {}).get("driver_version") or snap.get("gpu_note")
    have = {
        "command": bool(m.get("command")),
        "vLLM version": bool(m.get("vllm_version") or (m.get("versions") or {}).get("vllm")),
        "driver (or why none)": bool(driver),
        "environment snapshot": bool(snap) and "error" not in snap,
    }
    missing = [k for k, ok in have.items() if not ok]
    return Item(
        "saved",
        "image/vLLM/driver/command saved",
        MISSING if missing else DONE,
        f"missing: {', '.join(missing)}"
        if missing
        else f"vLLM {m.get('vllm_version')}, driver: {driver}, command of {len(m.get('command') or [])} args",
        (f.launches[0].file("manifest.json"),),
    )


def _cuda(f: Facts) -> Item:
    snap = f.env_snapshot()
    title = "CUDA 13 and r580+ checked"
    if snap is None:
        return Item("cuda", title, MISSING, "no environment snapshot (oomkit env)")
    sw, drv = snap.get("software") or {}, snap.get("driver") or {}
    if not snap.get("gpus"):
        return Item(
            "cuda",
            title,
            MISSING,
            f"no NVIDIA GPU in this environment ({sw.get('cuda_flavour')} build): "
            "check on the serving node with oomkit env --recipe",
            (),
        )
    flavour, version = sw.get("cuda_flavour") or "", drv.get("driver_version") or ""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else None
    ok = flavour.startswith("cu13") and major is not None and major >= 580
    return Item("cuda", title, DONE if ok else FAILED, f"build {flavour or 'unknown'}, driver {version or 'unknown'}")


def _same_set(f: Facts) -> Item:
    sent = [r for r in f.runs if r.request_set_id]
    cells = sum(len(r.compare.get("cells", [])) for r in f.runs if r.compare)
    if f.request_set_id and (len(sent) > 1 or cells > 1):
        return Item(
            "same_request_set",
            "same request set before and after",
            DONE,
            f"request set {f.request_set_id} in {len(sent)} run(s), {cells} compared cells",
        )
    return Item(
        "same_request_set",
        "same request set before and after",
        MISSING,
        "one measurement only: repeat with the same request-set.jsonl after a change (oomkit compare)",
    )


def _recorded(f: Facts) -> Item:
    pts = f.capacity().points
    has_mem = any(p.figures.get("peak_memory_bytes") for p in pts)
    has_lat = any(p.figures.get("ttft_ms_p95") is not None for p in pts)
    if pts and has_mem and has_lat:
        return Item(
            "recorded",
            "peak memory, latency and errors recorded",
            DONE,
            f"{len(pts)} measured load levels with peak memory, TTFT/e2e p95 and errors",
        )
    missing = [n for n, ok in (("load levels", bool(pts)), ("peak memory", has_mem), ("latency", has_lat)) if not ok]
    return Item("recorded", "peak memory, latency and errors recorded", MISSING, f"missing: {', '.join(missing)}")


def prefix_caching_disabled(f: Facts) -> bool:
    return f.profile_args().get("enable_prefix_caching") is False


def hit_rate_compared(f: Facts) -> bool:
    cells = [c for _, comp in f.with_compare for c in comp["cells"]]
    return len({c["mode"] for c in cells if c.get("prefix_cache_hit_rate") is not None}) >= 2


def _prefix(f: Facts) -> Item:
    title = "prefix caching not disabled without comparison"
    if prefix_caching_disabled(f) and not hit_rate_compared(f):
        return Item(
            "prefix_caching",
            title,
            FAILED,
            "the server ran with prefix caching off and no hit-rate comparison shows that it costs nothing",
        )
    if hit_rate_compared(f):
        return Item("prefix_caching", title, DONE, "hit rate measured per mode in the comparison")
    return Item("prefix_caching", title, DONE, "prefix caching was not disabled")


def _network(f: Facts) -> Item:
    title = "network and all-to-all backend checked"
    if f.recipe_check:
        rows = [
            r
            for r in f.recipe_check.rows
            if any(w in r.requirement.lower() for w in ("interconnect", "all-to-all", "nvlink", "rdma"))
        ]
        bad = [r for r in rows if r.status != "pass"]
        if rows:
            return Item(
                "network", title, FAILED if bad else DONE, "; ".join(f"{r.requirement}: {r.status}" for r in rows)
            )
    args = f.profile_args()
    if (
        whole(args.get("pipeline_parallel_size"), 1) == 1
        and not args.get("enable_expert_parallel")
        and whole(args.get("data_parallel_size"), 1) == 1
        and whole(args.get("tensor_parallel_size"), 1) == 1
    ):
        return Item("network", title, DONE, "not applicable: one device, no expert parallelism, no all-to-all")
    return Item(
        "network", title, MISSING, "multi-GPU layout: run oomkit env --recipe for the interconnect and all-to-all rows"
    )


def _described(f: DecisionFacts) -> Item:
    r = f.req
    return Item(
        "load_described",
        "target production load described in numbers",
        DONE,
        f"{r.concurrent_dialogs} dialogs x {r.agent_steps_per_dialog} steps, input {r.input_tokens.typical}/"
        f"{r.input_tokens.max} tokens, output {r.output_tokens.typical}/{r.output_tokens.max}",
        (r.source or "",),
    )


def _condition(f: DecisionFacts) -> Item:
    r = f.req
    return Item(
        "expansion_condition",
        "the condition for moving from tuning to expansion stated",
        DONE,
        f"expand when the measured capacity is below {r.target_with_reserve():g} concurrent dialogs "
        f"({r.concurrent_dialogs} + {r.peak_reserve_pct:g}% peak reserve) or a target request does not fit",
        (r.source or "",),
    )


CHECKS: tuple[Callable[[DecisionFacts], Item], ...] = (
    _phases,
    _initialised,
    _short_request,
    _saved,
    _cuda,
    _same_set,
    _recorded,
    _prefix,
    _network,
    _described,
    _condition,
)


def retest_item(path: str | None, ok: bool, why: str) -> Item:
    return Item(
        "retest",
        "the retest procedure after a vLLM update saved",
        DONE if ok else MISSING,
        why,
        (path,) if path else (),
    )


def checklist(f: DecisionFacts) -> list[Item]:
    return [check(f) for check in CHECKS]
