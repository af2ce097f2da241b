"""Verdicts of a log in which nothing failed: serving limited by the KV cache, a start-up that stalled,
finished or was cut short, or nothing recognised."""

from __future__ import annotations

import re

from oomkit.triage.engine import Triage
from oomkit.triage.model import Evidence, Verdict
from oomkit.triage.state import Hit
from oomkit.triage.stats import FULL_KV_PCT, NEAR_FULL_KV_PCT, QUEUED_KV_PCT
from oomkit.triage.verdict_make import Conclusion, make_verdict

HTTP_STATUS = re.compile(r'HTTP/[\d.]+" (\d{3})')


def pressure_verdict(t: Triage, hits: list[Hit]) -> Verdict | None:
    stats = t.facts.stats
    preempt = next((h for h in hits if h.rule.cls == "pressure"), None)
    strong = bool(preempt or stats.full_samples >= 2 or stats.saturated_samples or stats.preemptions > 0)
    edge = _ends_near_full(stats.last)
    if not (strong or edge):
        return None
    parts = []
    if stats.preemptions:
        parts.append(f"{stats.preemptions:g} preemptions in stats lines")
    if stats.full_samples:
        parts.append(
            f"KV cache >= {FULL_KV_PCT:g}% with requests waiting in {stats.full_samples} of {stats.samples} stats lines"
        )
    if preempt:
        parts.append(preempt.rule.what)
    extra = list(stats.full_evidence)
    if not strong and stats.recent:
        last = stats.last
        parts.append(
            f"the last stats line shows the KV cache {last.get('kv_usage_pct', 0.0):g}% used with "
            f"{last.get('waiting', 0.0):g} requests waiting"
        )
        extra.append(stats.recent[-1][1])
    return make_verdict(
        Conclusion(
            "cache_pressure",
            False,
            "medium" if strong else "low",
            "no crash; serving limited by KV capacity"
            if strong
            else "no crash; the log ends with the KV cache near full",
            "; ".join(parts),
            preempt.rule.id if preempt else "R-STATS",
        ),
        [preempt] if preempt else [],
        t,
        extra=extra,
    )


def _ends_near_full(last: dict[str, float]) -> bool:
    kv, waiting = last.get("kv_usage_pct", 0.0), last.get("waiting", 0.0)
    return kv >= NEAR_FULL_KV_PCT or (waiting > 0 and kv >= QUEUED_KV_PCT)


def no_failure_verdict(t: Triage) -> Verdict:
    st = t.state
    if st.slow is not None:
        return make_verdict(
            Conclusion(
                "timeout",
                False,
                "medium",
                "a startup step ran longer than vLLM's default readiness timeout (600 s)",
                "startup stalled: one step took longer than a readiness deadline allows",
                "SLOW-STEP",
            ),
            [],
            t,
            extra=[st.slow],
            decided_by="marker",
        )
    stalled = _stalled(t)
    if stalled is not None:
        running, line = stalled
        return make_verdict(
            Conclusion(
                "timeout",
                False,
                "low",
                "the last stats line shows requests running and no token in its interval; no error follows",
                f"the engine stopped making progress while serving: the last stats line shows {running:g} request(s) "
                "running and 0 tokens/s (a hang, or one step longer than the stats interval)",
                "R-STALL",
            ),
            [],
            t,
            extra=[line],
        )
    if st.request_error is not None:
        return make_verdict(
            Conclusion(
                "not_oom_other",
                False,
                "low",
                "the API server's request handler logged an error and the engine logged none",
                "a request failed in the API server (an HTTP error for that request, not a memory error); "
                "the engine itself logged no failure",
                "R-REQUEST",
            ),
            [],
            t,
            extra=[st.request_error],
            decided_by="template",
        )
    answered = next((h for h in t.hits() if h.rule.cls == "http"), None)
    if answered is not None:
        status = HTTP_STATUS.search(answered.evidence.text)
        return make_verdict(
            Conclusion(
                "not_oom_other",
                False,
                "low",
                "the API server answered an inference request with an error status and the engine logged no failure",
                f"a request failed: the API server answered it with HTTP {status.group(1) if status else 'an error'} "
                "while the engine logged no failure (the request's content or a setting it asks for, not memory)",
                answered.rule.id,
            ),
            [answered],
            t,
            decided_by="template",
        )
    progress = _offline_progress(t)
    if progress is not None:
        return _offline_verdict(t, *progress)
    if st.ready:
        how = " and stopped cleanly" if st.shutdown else ""
        return make_verdict(
            Conclusion(
                "healthy",
                False,
                "medium",  # the ready line is a fact; "no failure" is read from what an excerpt left in
                "ready marker and no failure line",
                f"the server became ready{how}; no failure was logged",
                None,
            ),
            [],
            t,
            extra=[Evidence(e.file, e.line, "") for e in st.timeline[-1:]],
            decided_by="marker",
        )
    if st.engine_warm is not None:
        return make_verdict(
            Conclusion(
                "healthy",
                False,
                "medium",
                "start-up finished its memory steps (weights, KV cache, graphs); the log ends before the ready line",
                "the engine finished start-up with no failure logged (the excerpt ends before the API server's ready line)",
                None,
            ),
            [],
            t,
            extra=[st.engine_warm],
            decided_by="marker",
        )
    no_room = _no_kv_room(t)
    if no_room is not None:
        return make_verdict(
            Conclusion(
                "kv_cache_allocation",
                True,
                "medium",
                "vLLM's memory plan printed no memory (or no block) for the KV cache; the error after it is not in the log",
                "the weights and the profiled peak left no room for the KV cache within gpu_memory_utilization: vLLM "
                "stops here ('No available memory for the cache blocks')",
                "R-NOKV",
            ),
            [],
            t,
            extra=[no_room],
            decided_by="marker",
        )
    sized = _kv_sized(t)
    if sized is not None:
        return make_verdict(
            Conclusion(
                "healthy",
                False,
                "low",
                "the KV cache was sized (vLLM's memory plan fitted) and no error follows; the log ends before ready",
                "start-up got past weights, profiling and KV-cache sizing with no failure logged; the excerpt ends "
                "before the ready line, so a later step (graph capture) is not seen",
                None,
            ),
            [],
            t,
            extra=[sized],
            decided_by="marker",
        )
    if st.timeline:
        last = st.timeline[-1].phase
        return make_verdict(
            Conclusion(
                "unknown",
                False,
                "low",
                "log ends before ready without an error line",
                f"the log ends during {last.replace('_', ' ')} with no error: startup still running, killed silently, or the excerpt is partial",
                None,
            ),
            [],
            t,
            decided_by="marker",
        )
    return make_verdict(
        Conclusion(
            "unknown",
            False,
            "low",
            "no vLLM startup or failure line recognised",
            "no vLLM phase marker or failure line was found",
            None,
        ),
        [],
        t,
    )


def _offline_progress(t: Triage) -> tuple[int, int, Evidence] | None:
    """The last redraw of LLM.generate's progress bar, when it shows the call finished (N/N) or never finished a
    prompt (0/N); a bar part-way says nothing about why the log ends there."""
    done, total = t.facts.figures.get("offline_prompts_done"), t.facts.figures.get("offline_prompts_total")
    evidence = t.facts.evidence.get("offline_prompts_done")
    if not isinstance(done, int) or not isinstance(total, int) or total <= 0 or evidence is None:
        return None
    return (done, total, evidence) if done in (0, total) else None


def _offline_verdict(t: Triage, done: int, total: int, evidence: Evidence) -> Verdict:
    if done == total:
        conclusion = Conclusion(
            "healthy",
            False,
            "medium",
            "the offline generate call's progress bar reached its end and no failure line follows",
            f"LLM.generate finished all {total} prompt(s); no failure was logged",
            None,
        )
    else:
        # the bar is drawn at 0/N when the call starts and redrawn when a prompt finishes: a log that ends on 0/N
        # with no error stopped while the first step had not completed (a hang, or a kill the log does not show)
        conclusion = Conclusion(
            "timeout",
            False,
            "low",
            "the offline generate call's progress bar stays at 0 prompts done and nothing follows",
            f"LLM.generate started {total} prompt(s) and the log ends before the first one finished, with no error: "
            "the engine hung in its first steps (or was killed without a trace)",
            "R-NOPROGRESS",
        )
    return make_verdict(conclusion, [], t, extra=[evidence], decided_by="marker")


def _stalled(t: Triage) -> tuple[float, Evidence] | None:
    """Requests running and the log's last stats line, when that line shows requests running and no token at all in its interval.
    vLLM prints a stats line every interval (V1: 10 s, `LoggingStatLogger`; V0: at least 5 s apart);
    running requests get a token at every finished step, and V1 prints only the first interval with no
    throughput at INFO (`engine_is_idle` logs the rest at DEBUG). So a log whose last stats line has
    Running >= 1 at 0 tokens/s, and nothing failing after it, stopped while no step finished: a hang."""
    recent = t.facts.stats.recent
    if not recent:
        return None
    last, evidence = recent[-1]
    quiet = last.get("prompt_tps") == 0 and last.get("generation_tps") == 0
    running = last.get("running", 0.0)
    return (running, evidence) if quiet and running >= 1 else None


def _kv_sized(t: Triage) -> Evidence | None:
    """The line where vLLM printed the KV pool it allocated (tokens or blocks, more than zero): the
    result of the start-up's memory plan, printed only once profiling fitted."""
    figures, evidence = t.facts.figures, t.facts.evidence
    for name in ("kv_cache_tokens", "num_gpu_blocks"):
        value = figures.get(name)
        if isinstance(value, (int, float)) and value > 0 and name in evidence:
            return evidence[name]
    return None


def _no_kv_room(t: Triage) -> Evidence | None:
    """The line where vLLM printed a KV budget of zero or less ("Available KV cache memory: -0.87 GiB", V0's
    "# GPU blocks: 0"): the memory plan failed, and vLLM raises "No available memory for the cache blocks" next
    (V1 `_check_enough_kv_cache_memory`, V0 `raise_if_cache_size_invalid`)."""
    figures, evidence = t.facts.figures, t.facts.evidence
    for name in ("available_kv_cache_gib", "num_gpu_blocks"):
        value = figures.get(name)
        if isinstance(value, (int, float)) and value <= 0 and name in evidence:
            return evidence[name]
    return None
