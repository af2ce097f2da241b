"""From what the log showed to one verdict: the strongest failure, placed in its phase."""

from __future__ import annotations

import re
from collections.abc import Mapping

from oomkit.redact import redact
from oomkit.triage.engine import Triage
from oomkit.triage.markers import WORKER_START
from oomkit.triage.model import DecidedBy, FigureValue, Verdict
from oomkit.triage.quiet import no_failure_verdict, pressure_verdict
from oomkit.triage.rules import PHASES
from oomkit.triage.state import Hit
from oomkit.triage.verdict_explicit import explicit
from oomkit.triage.verdict_freed import figure_gib, forward_pass, no_forward_pass
from oomkit.triage.verdict_make import Conclusion, make_verdict, wrapper_hits
from oomkit.triage.verdict_unplaced import unplaced_crash
from oomkit.triage.verdict_warmup import warmup_evidence


def decide(t: Triage) -> Verdict:
    hits = t.hits()
    fatal = [h for h in hits if h.rule.rank >= 50]
    if fatal:
        return _from_hit(t, max(fatal, key=lambda h: h.rule.rank), hits)
    died = next((h for h in hits if h.rule.cls == "died"), None)
    if died and not _raised_before(died, hits):
        return _vanished(t, died, hits)
    wrappers = [h for h in hits if h.rule.cls in ("wrapper", "exception")]
    wrappers = wrappers or [h for h in hits if h.rule.cls == "dump"]  # the step's input dump: it raised
    if wrappers:
        return _crash(t, wrappers, hits)
    pressure = pressure_verdict(t, hits)
    if pressure:
        return pressure
    request = next((h for h in hits if h.rule.cls == "request"), None)
    if request:
        return make_verdict(
            Conclusion(
                "not_oom_other", False, "high", "an explicit error of one request", request.rule.what, request.rule.id
            ),
            [request],
            decided_by="template",
        )
    return no_failure_verdict(t)


def _from_hit(t: Triage, hit: Hit, hits: list[Hit]) -> Verdict:
    rule = hit.rule
    phase, confidence, reason = explicit(hit)
    decided: DecidedBy = "template" if phase == rule.phase else decided_by(hit)
    if phase is None:
        phase, confidence, reason = _context_phase(hit, t.facts.figures, warmup_evidence(t, hit, hits), _budget(t))
        decided = decided_by(hit)
    elif phase == "not_oom_other" and rule.cls == "crash" and (framed := _placed_startup(hit)):
        # The decision order puts the failing frames, then the last start-up marker, before the
        # message: a kernel crash or a compile error inside start-up is a failure of that start-up
        # phase (not memory); only a crash while serving is `not_oom_other`.
        phase, decided = framed
        confidence = "medium" if decided == "frames" else "low"
        by = "its traceback frames place" if decided == "frames" else "the last start-up step logged before it places"
        reason = f"{rule.id} line inside start-up: {by} it in {phase.replace('_', ' ')}"
    summary = rule.what
    if phase in ("serving_prefill", "serving_decode") and rule.phase is None:
        summary += f" while serving ({phase.split('_')[1]})"
    elif rule.is_oom and rule.phase is None:
        summary += f" during {phase.replace('_', ' ')}"
    support = [hit] + [h for h in hits if h is not hit and h.rule.rank >= 50][:2] + wrapper_hits(hits)[:1]
    return make_verdict(
        Conclusion(phase, rule.is_oom, confidence, reason, summary, rule.id), support, t, decided_by=decided
    )


def decided_by(hit: Hit) -> DecidedBy:
    """The decision-order step behind a hit's context phase."""
    if hit.context_phase is None:
        return "context"
    sources: dict[str, DecidedBy] = {"frames": "frames", "markers": "marker", "nearby": "marker", "message": "template"}
    return sources.get(hit.context_source, "context")


def _context_phase(
    hit: Hit, figures: Mapping[str, FigureValue] | None = None, warmup: str | None = None, budget: float | None = None
) -> tuple[str, str, str]:
    """`warmup`: why the error may be V1's sampler warm-up (verdict_warmup); `budget`: the
    gpu_memory_utilization fraction the log's settings name, if any."""
    phase, source = hit.context_phase, hit.context_source
    if phase is None or phase == "timeout":  # a memory error is not placed by a wait it interrupted
        return _placeless(hit, figures or {}, warmup, budget)
    if phase in ("serving", "ready") and hit.rule.is_oom and SLEEP_ALLOCATOR.search(hit.evidence.text):
        # the sleep-mode pool maps memory only while loading, sizing the KV cache and waking up, never for a step
        return "kv_cache_allocation", "low", "sleep-mode allocator out of memory once the engine was up: its wake_up"
    if phase == "serving":
        hint = hit.prefill_hint
        phase = "serving_decode" if hint == "decode" else "serving_prefill"
        where = "after the server was ready" if hit.after_ready else "serving frames in the traceback"
        why = f"{where}; " + (
            f"{hint} from frames or the last stats line" if hint else "nothing tells prefill from decode"
        )
        return phase, "medium" if hint else "low", why
    if phase == "distributed_init":
        phase = "weight_loading"  # the first large allocation after init is the model itself
    if source == "nearby":
        return phase, "low", "no marker before the error; placed by the first marker after it (other ranks' progress)"
    confidence = "high" if source == "frames" else "medium"
    return (
        phase,
        confidence,
        "phase from traceback frames" if source == "frames" else "phase from the last marker before the error",
    )


# vLLM's CuMemAllocator extension (csrc/cumem_allocator.cpp, 0.7.3+), used only with enable_sleep_mode, prints its
# CUDA driver errors as "CUDA Error: out of memory at .../cumem_allocator.cpp:62" before Python sees them.
SLEEP_ALLOCATOR = re.compile(r"cumem_allocator\.cpp")
# PyTorch's share of the device above which no gpu_memory_utilization budget was holding it (see _placeless).
UNBUDGETED_SHARE = 0.98


def _placeless(
    hit: Hit, figures: Mapping[str, FigureValue], warmup: str | None = None, budget: float | None = None
) -> tuple[str, str, str]:
    """A memory error with no marker or frame around it: what its own numbers imply, else unknown."""
    if hit.rule.cls == "oom_host":  # host RAM peaks while weights are read into memory
        return (
            "weight_loading",
            "low",
            "host-memory kill with no phase marker in the log; weight loading is where host RAM peaks",
        )
    tried, total = figure_gib(figures, "oom_tried_gib"), figure_gib(figures, "oom_total_gib")
    allocated = figure_gib(figures, "oom_pytorch_allocated_gib")
    if tried and total and tried > total:
        return (
            "memory_profiling",
            "low",
            (
                f"one allocation of {tried:g} GiB exceeds the whole device ({total:g} GiB): an activation "
                "for a worst-case shape, which the profiling pass is the first to run"
            ),
        )
    if hit.rule.is_oom and (loading := no_forward_pass(figures)) is not None:
        return loading
    # vLLM sizes the KV pool so that weights + profiled peak + KV fill gpu_memory_utilization x total:
    # PyTorch holding far more than that budget is not a budgeted engine serving, but a step that
    # ignores the budget (weight loading, which loads until the device is full). The budget counts the
    # CUDA context and NCCL buffers too, which PyTorch does not allocate: even at the highest budgets
    # people set (0.95-0.97) a serving engine's PyTorch share stays under 98% of the device.
    ceiling = min(budget + 0.1, UNBUDGETED_SHARE) if budget is not None else UNBUDGETED_SHARE
    over_budget = allocated is not None and total is not None and allocated > ceiling * total
    if allocated and total and allocated >= 0.9 * total and not over_budget:
        return (
            "serving_prefill",
            "low",
            (
                f"PyTorch already held {allocated:g} of {total:g} GiB, so the KV pool was allocated: "
                "the engine was past start-up; no stats line tells prefill from decode"
            ),
        )
    if over_budget and allocated and total and hit.rule.is_oom:
        return (
            "weight_loading",
            "low",
            (
                f"PyTorch held {allocated:g} of {total:g} GiB, more than a gpu_memory_utilization budget leaves it: "
                "a step no budget bounds, and loading the weights is the first to fill the device"
            ),
        )
    private = figure_gib(figures, "oom_private_pools_gib")
    if private and hit.rule.is_oom and warmup and not hit.after_ready:
        # V1 warms the sampler up after capture_model, at max_num_seqs dummy requests, so that
        # serving never allocates more there (gpu_worker.compile_or_warm_up_model): an OOM with
        # graphs already captured, no ready line and the sampler's frames or a failed start-up is
        # that warm-up.
        return (
            "memory_profiling",
            "low",
            (
                f"CUDA graphs already held {private:g} GiB and {warmup}, with no ready line: V1's sampler "
                "warm-up, which runs after graph capture"
            ),
        )
    if private and hit.rule.is_oom:
        return (
            "serving_prefill",
            "low",
            (
                f"CUDA graphs already held {private:g} GiB (PyTorch's private pools), so start-up was past "
                "graph capture; no stats line tells prefill from decode"
            ),
        )
    if hit.rule.is_oom and (cached := forward_pass(figures)) is not None:
        return cached
    if hit.rule.is_oom and SLEEP_ALLOCATOR.search(hit.evidence.text):
        return (
            "kv_cache_allocation",
            "low",
            (
                "vLLM's sleep-mode allocator (cumem_allocator.cpp) could not map memory, with nothing placing it: "
                "the pools it maps are the weights and the KV cache, at start and again at wake_up, where the KV pool "
                "(sized to fill the device) is what memory another process took leaves no room for"
            ),
        )
    if hit.rule.is_oom:
        # A start-up log is short and is pasted whole, markers and all; a server that ran for hours is quoted by its
        # error alone. So an OOM line with nothing around it is most often a request's: of the dev part's 55 lone OOM
        # lines (session 25), 23 were labelled serving prefill, 12 weight loading, 8 profiling, 4 decode.
        return (
            "serving_prefill",
            "low",
            (
                "a lone out-of-memory line with no marker, frame or figure to place it; a request's prefill is "
                "the likeliest phase (start-up failures are pasted with their markers), not a known one"
            ),
        )
    return "unknown", "low", "memory error with no phase marker or traceback frame to place it"


def _budget(t: Triage) -> float | None:
    """The gpu_memory_utilization fraction from the log's printed settings (None when not printed)."""
    value = t.facts.args.get("gpu_memory_utilization", t.facts.figures.get("gpu_memory_utilization"))
    return float(value) if isinstance(value, int | float) and 0 < value <= 1 else None


def _raised_before(died: Hit, hits: list[Hit]) -> bool:
    """An exception line earlier in the same file than a process's death: the process logged its cause (Python
    printed the exception it died of) before the parent reported it gone."""
    return any(
        h.rule.cls == "exception" and h.evidence.file == died.evidence.file and h.evidence.line < died.evidence.line
        for h in hits
    )


def _vanished(t: Triage, died: Hit, hits: list[Hit]) -> Verdict:
    """A process vanished: SIGKILL from outside (OOM killer, a person) or a crash in native code."""
    return make_verdict(
        Conclusion(
            "unknown",
            False,
            "low",
            "an engine process died without logging a cause",
            "an engine or worker process died without logging why: killed from outside (host OOM killer, a signal) "
            "or crashed in native code; check `dmesg`, `kubectl describe pod` (OOMKilled) or the container's exit code",
            died.rule.id,
        ),
        [died] + wrapper_hits(hits)[:1],
        t,
    )


def _crash(t: Triage, wrappers: list[Hit], hits: list[Hit]) -> Verdict:
    """The engine raised an exception that matches no failure rule (or the excerpt cut it off)."""
    exc = t.state.last_exception
    first = wrappers[0]
    shown = wrappers[:3]
    waited = next((h for h in wrappers if h.context_phase == "timeout"), None)
    if waited is not None:
        return make_verdict(
            Conclusion(
                "timeout",
                False,
                "medium" if exc else "low",
                "the traceback ends in the wait for a worker's reply"
                + ("" if exc else "; its exception is not in the log"),
                "a worker stopped answering (hang): the engine failed while waiting for its reply, not for lack of memory",
                waited.rule.id,
            ),
            shown,
            t,
            extra=[exc] if exc else [],
            decided_by="frames",
        )
    if exc is None and first.context_phase == "serving":
        # Most crashes while serving are not memory (bugs, bad requests, kernels): without the
        # exception line, not_oom_other is the likelier answer, and the confidence says it is a guess.
        phase, _, why = _context_phase(first)
        return make_verdict(
            Conclusion(
                "not_oom_other",
                False,
                "low",
                f"the exception line is not in the log; {why}",
                f"the engine crashed while serving ({phase.split('_')[1]}); the log stops before the exception, "
                "so whether memory ran out is not known",
                first.rule.id,
            ),
            shown,
            t,
            decided_by=decided_by(first),
        )
    if exc is None and not first.after_ready and first.context_phase is not None:
        early = _before_loading(t, first)
        phase = early or first.context_phase
        if phase in ("distributed_init", "environment") or (
            WORKER_START.search(first.evidence.text) and phase not in ("weight_loading", "network_communication")
        ):
            phase = "environment"  # a worker that fails before loading fails in device or distributed init
        return make_verdict(
            Conclusion(
                phase if phase in PHASES else "unknown",
                False,
                "low",
                'start-up failed before weight loading began (no "Starting to load model" line); cause not in the log'
                if early
                else f"start-up failed; phase from {_placed_by(first)}, cause not in the log",
                f"start-up failed during {phase.replace('_', ' ')}; the root-cause line is not in the log",
                first.rule.id,
            ),
            shown,
            t,
            decided_by=decided_by(first),
        )
    if exc is None and not first.after_ready and WORKER_START.search(first.evidence.text):
        return make_verdict(
            Conclusion(
                "environment",
                False,
                "low",
                "a worker failed to start before any phase marker",
                "a worker failed to start before loading weights: device or distributed initialisation",
                first.rule.id,
            ),
            shown,
            t,
            decided_by="template",
        )
    if exc is None and first.context_phase is None and not t.state.timeline and len(hits) == len(wrappers):
        # Only a wrapper ("Engine core initialization failed", "EngineDeadError"): no exception, no
        # frame, no marker, no other signal: nothing tells what failed or whether memory ran out.
        return make_verdict(
            Conclusion(
                "unknown",
                False,
                "low",
                "the engine died, but neither its exception nor a phase is in the log",
                "the engine died; the root-cause lines above the wrapper are not in the log: collect the whole log",
                first.rule.id,
            ),
            shown,
            t,
        )
    placed = _startup_context(wrappers) if exc is not None else None
    if placed is not None and exc is not None:
        phase, hit = placed
        phase = _before_loading(t, hit) or phase
        return make_verdict(
            Conclusion(
                phase,
                False,
                "medium" if hit.context_source == "frames" else "low",
                f"a non-memory exception during start-up, placed by its {'frames' if hit.context_source == 'frames' else 'last marker'}",
                f"start-up failed during {phase.replace('_', ' ')} with an error that is not a memory error: "
                f"{redact(exc.text.split('] ')[-1])[:200]}",
                first.rule.id,
            ),
            shown,
            t,
            extra=[exc],
            decided_by=decided_by(hit),
        )
    return unplaced_crash(t, exc, first, shown, hits)


def _placed_by(hit: Hit) -> str:
    return "its traceback frames" if hit.context_source == "frames" else "the last marker"


def _placed_startup(hit: Hit) -> tuple[str, DecidedBy] | None:
    """The start-up phase a hit's own traceback frames name, else the last start-up marker before
    it; None when neither places it before the server was ready."""
    placed = _startup_context([hit])
    if not placed or hit.context_source not in ("frames", "markers"):
        return None
    return placed[0], "frames" if hit.context_source == "frames" else "marker"


def _startup_context(wrappers: list[Hit]) -> tuple[str, Hit] | None:
    """Where a non-memory exception before the server was ready happened: the phase its traceback
    frames (or the last marker) give. A crash while loading weights is a weight-loading failure."""
    for hit in reversed(wrappers):
        phase = hit.context_phase
        if hit.after_ready or phase in (None, "serving", "ready"):
            continue
        if phase == "distributed_init":
            phase = "environment"  # a device or process-group set-up error that is not NCCL's
        if phase in PHASES:
            return phase, hit
    return None


def _before_loading(t: Triage, hit: Hit) -> str | None:
    """`environment` for a non-memory failure that the last marker places in weight loading only as
    the step that comes next: every vLLM from 0.6 (V0 and V1 model runners) logs "Starting to load
    model" as load_model begins, so with no weight-loading line the failure came before it, in the
    device, distributed or model-runner set-up (the installation and the platform, not the weights)."""
    if hit.context_source != "markers" or hit.context_phase != "weight_loading" or hit.after_ready:
        return None
    reached = {entry.phase for entry in t.state.timeline}
    return None if "weight_loading" in reached else "environment"
