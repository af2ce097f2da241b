"""Rules that judge a failure the runs recorded before capacity can be weighed: a broken environment,
a refused request, a crash that is not an OOM, and the OOMs of start-up (load, graph capture, KV pool).
They come first in the table: capacity measured on a broken setup means nothing."""

from __future__ import annotations

from oomkit.decide.documents import StepDoc, StepFailure, number
from oomkit.decide.evidence import RunEvidence
from oomkit.decide.facts import ENV_PHASES, LOAD_PHASES, DecisionFacts, Facts
from oomkit.decide.fired import Ctx, Fired, cited, log_lines
from oomkit.decide.model import EvidenceDoc, Numbers
from oomkit.decide.topology import topology_or_expand


def environment(f: DecisionFacts, ctx: Ctx) -> Fired | None:
    failed = f.failed_launches(ENV_PHASES)
    rows = [r for r in (f.recipe_check.rows if f.recipe_check else ()) if r.status == "fail"]
    if not failed and not rows:
        return None
    ev = tuple(e for r, v in failed for e in log_lines(r.path, v))
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
            ev = cited(run.path, fail.get("evidence", [])[:4])
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
            log_lines(r.path, v),
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
        log_lines(run.path, v),
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
        log_lines(run.path, v),
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
            log_lines(run.path, v),
            (f"set max_model_len to {need} (vLLM's estimate of what fits: {est})",),
        )
    verdict, more, recs = topology_or_expand(f)
    short = f"{need / est:.2f}x" if est else "unknown"
    return Fired(
        verdict,
        f"the KV pool cannot hold one request of the required {need} tokens (vLLM estimates "
        f"{est}): KV memory short by {short}",
        {**numbers, **more},
        log_lines(run.path, v),
        tuple(recs),
    )
