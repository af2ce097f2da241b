"""The six ladder steps. Each sends requests from the request set through the shared `Load`,
one labelled window per step (or per rung), and returns a StepResult."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from oomkit.client.records import RequestRecord
from oomkit.errors import InputError
from oomkit.fsio import json_object, json_objects
from oomkit.ladder.result import ContextLimit, StepResult, from_windows, server_died
from oomkit.loadrun.engine import Load, SessionBatch, Window
from oomkit.loadrun.failure import classify, length_note
from oomkit.loadrun.history import scaled
from oomkit.loadrun.knee import Knee, Rung, find_knee
from oomkit.loadrun.progress import Progress
from oomkit.loadrun.stats import summarise
from oomkit.loadrun.streams import burst_note
from oomkit.loadrun.target import Target
from oomkit.serial import Json, JsonObject, to_json_object, to_jsonable
from oomkit.workload.requestset import RequestSet, SetRequest

# The repeat step runs steps 1-3 twice with this override; every body already carries a fixed seed.
# Steps 1-3 themselves keep the workload's sampling: greedy decoding of a random model inside a
# tool-call grammar can loop on whitespace until max_tokens, seeded sampling does not.
DETERMINISTIC = {"temperature": 0.0}
THINK_MARKERS = ("<think>", "</think>")  # reasoning left in content: the reasoning parser is off
MAX_LIMIT = re.compile(r"maximum context length is (\d+)|maximum model length of (\d+)")
SLO_SHARE = 0.95  # a rung breaches its SLOs when fewer than 95% of its requests meet them


@dataclass(frozen=True)
class LadderOptions:
    max_concurrency: int = 32
    max_history_doublings: int = 6
    max_prompt_tokens: int | None = None
    agent_steps: int | None = None
    """K of step 3 and the steps per session in each concurrency rung (default: the workload's)."""
    slos: dict[str, float] = field(default_factory=dict)
    expect_reasoning: bool = False


@dataclass
class Ctx:
    """What the steps share while a ladder runs: the load (and through it the load context), the
    options, and what earlier steps found."""

    load: Load
    opts: LadderOptions
    sent: dict[str, list[tuple[SetRequest, RequestRecord]]] = field(default_factory=dict)
    context: ContextLimit = field(default_factory=lambda: ContextLimit())
    knee: Knee | None = None
    kept_rungs: dict[int, tuple[Rung, Window]] = field(default_factory=dict)
    """Concurrency rungs an earlier attempt finished (--resume): replayed, not sent again."""
    on_rung: Callable[[Rung, Window], None] | None = None
    """Called with each rung as it finishes (run_steps records it in rungs.jsonl)."""

    @property
    def target(self) -> Target:
        return self.load.ctx.target

    @property
    def rs(self) -> RequestSet:
        return self.load.ctx.request_set

    @property
    def progress(self) -> Progress:
        return self.load.ctx.progress

    def steps_k(self) -> int:
        first = self.rs.sessions()[0]
        return max(1, min(self.opts.agent_steps or len(first), len(first)))


async def _failure(ctx: Ctx, windows: list[Window]):
    records = [r for w in windows for r in w.records]
    deltas = windows[-1].deltas if windows else None
    return await asyncio.to_thread(classify, records, ctx.target, deltas)


def _window_notes(windows: list[Window]) -> tuple[str, ...]:
    """What a step notes without failing: requests the server refused as too long (loadrun.failure),
    answers that did not stream (loadrun.streams)."""
    records = [r for w in windows for r in w.records]
    notes = (length_note(sum(r.error_kind == "context_length" for r in records)), burst_note(records))
    return tuple(note for note in notes if note)


async def _send_all(ctx: Ctx, name: str, reqs: list[SetRequest]) -> tuple[list[Window], list[RecordPair]]:
    pairs: list[tuple[SetRequest, RequestRecord]] = []
    ctx.progress.start(name, len(reqs))
    async with ctx.load.window(name) as out:
        for req in reqs:
            rec = await ctx.load.send(req)
            ctx.progress.advance()
            pairs.append((req, rec))
            if not rec.ok:
                break
    ctx.progress.finish()
    ctx.sent[name] = pairs
    return out, pairs


RecordPair = tuple[SetRequest, RequestRecord]


async def short_request(ctx: Ctx) -> StepResult:
    short = ctx.rs.probe("short")
    if short is None:
        raise InputError("the request set has no short request", hint="materialise the workload again")
    windows, pairs = await _send_all(ctx, "short_request", [short])
    rec = pairs[0][1]
    failure = await _failure(ctx, windows)
    notes: list[str] = []
    leaked = any(m in rec.content for m in THINK_MARKERS)
    separated = None if not (rec.reasoning or leaked) else (bool(rec.reasoning) and not leaked)
    if leaked:
        notes.append("reasoning markers in content: the server's reasoning parser did not separate them")
    if ctx.opts.expect_reasoning and not rec.reasoning:
        notes.append("no reasoning returned although --expect-reasoning was given")
    notes.extend(_window_notes(windows))
    ok = rec.ok and not leaked and not (ctx.opts.expect_reasoning and not rec.reasoning)
    detail: JsonObject = {
        "reasoning_separated": separated,
        "content_chars": len(rec.content),
        "reasoning_chars": len(rec.reasoning or ""),
        "finish_reason": rec.finish_reason,
    }
    return from_windows("short_request", windows, ok, failure, tuple(notes), detail)


async def tool_call(ctx: Ctx) -> StepResult:
    probe = ctx.rs.probe("tool")
    if probe is None:
        async with ctx.load.window("tool_call") as out:
            pass
        return from_windows("tool_call", out, False, notes=("the workload defines no tools",), detail={"skipped": True})
    windows, pairs = await _send_all(ctx, "tool_call", [probe])
    rec = pairs[0][1]
    check = rec.tool_check
    tools = json_objects(probe.body.get("tools"))
    strict = any(json_object(t.get("function")).get("strict") for t in tools)
    detail: JsonObject = {
        "valid": bool(check and check.valid),
        "problems": list(check.problems) if check else [],
        "strict": strict,
        "tool_choice": probe.body.get("tool_choice"),
        "calls": [c.to_dict() for c in rec.tool_calls],
        "retries": rec.retries,
    }
    invalid = () if not check or check.valid else (f"invalid tool call: {'; '.join(check.problems)}",)
    notes = invalid + _window_notes(windows)
    return from_windows("tool_call", windows, bool(check and check.valid), await _failure(ctx, windows), notes, detail)


async def agent_steps(ctx: Ctx) -> StepResult:
    steps = ctx.rs.sessions()[0][: ctx.steps_k()]
    windows, pairs = await _send_all(ctx, "agent_steps", steps)
    checks = [r.tool_check for _, r in pairs if r.tool_check is not None]
    invalid = [
        f"step {r.step}: {'; '.join(r.tool_check.problems)}"
        for _, r in pairs
        if r.tool_check and not r.tool_check.valid
    ]
    ok = len(pairs) == len(steps) and all(r.ok for _, r in pairs) and not invalid
    detail: JsonObject = {
        "steps": len(steps),
        "answered": sum(r.ok for _, r in pairs),
        "tool_checks": len(checks),
        "tool_checks_valid": sum(c.valid for c in checks),
        "cached_tokens": [r.cached_tokens for _, r in pairs],
        "prompt_tokens": [r.prompt_tokens for _, r in pairs],
    }
    notes = tuple(f"invalid tool call at {i}" for i in invalid[:3]) + _window_notes(windows)
    return from_windows("agent_steps", windows, ok, await _failure(ctx, windows), notes, detail)


def _limit_from(rec: RequestRecord, fallback: int | None) -> int | None:
    m = MAX_LIMIT.search(rec.error or "")
    return int(m.group(1) or m.group(2)) if m else fallback


async def history_doubling(ctx: Ctx) -> StepResult:
    base = ctx.rs.sessions()[0][-1]
    windows: list[Window] = []
    rungs: list[Json] = []
    ctx.context = ContextLimit(found=False, limit_tokens=None, largest_ok_prompt_tokens=None)
    failure = None
    ctx.progress.start("history_doubling", ctx.opts.max_history_doublings + 1)
    for i in range(ctx.opts.max_history_doublings + 1):
        factor = 2**i
        req = scaled(base, factor)
        estimate = req.sizes.get("prompt_tokens_estimate")
        if ctx.opts.max_prompt_tokens and estimate and estimate > ctx.opts.max_prompt_tokens:
            break
        async with ctx.load.window(f"history_x{factor}") as out:
            rec = await ctx.load.send(req, DETERMINISTIC)
        ctx.progress.advance()
        windows += out
        rungs.append(
            {
                "factor": factor,
                "ok": rec.ok,
                "prompt_tokens": rec.prompt_tokens or estimate,
                "error_kind": rec.error_kind,
                "ttft_ms": rec.ttft_ms,
                "peak_memory_bytes": out[0].peak_memory_bytes,
            }
        )
        if rec.ok:
            ctx.context["largest_ok_prompt_tokens"] = rec.prompt_tokens or estimate
            continue
        if rec.error_kind == "context_length":
            ctx.context["found"] = True
            ctx.context["limit_tokens"] = _limit_from(rec, ctx.target.info.max_model_len)
        else:
            failure = await _failure(ctx, out)
        break
    ctx.progress.finish()
    # The request that hit the context limit is the expected end of this step, not an error.
    step = from_windows(
        "history_doubling", windows, True, failure, detail={"rungs": rungs, "context": to_jsonable(ctx.context)}
    )
    if ctx.context.get("found"):
        step = _without_expected_error(step)
    return step


def _without_expected_error(step: StepResult) -> StepResult:
    from dataclasses import replace

    return replace(step, errors=max(0, step.errors - 1), ok=step.failure is None)


def _rung_verdict(window: Window, slos: dict[str, float]) -> tuple[str, JsonObject]:
    stats = summarise(window.records, window.duration_s, slos or None)
    d = window.deltas
    detail: JsonObject = {
        "requests": stats.requests,
        "errors": stats.errors,
        "preemptions": d.preemptions,
        "max_kv_usage": d.max_kv_usage,
        "max_waiting_by_reason": to_jsonable(d.max_waiting_by_reason),
        "ttft_ms_p95": stats.ttft_ms_p95,
        "latency_ms_p95": stats.latency_ms_p95,
        "slo_attainment": stats.slo_attainment,
        "peak_memory_bytes": window.peak_memory_bytes,
    }
    if stats.errors:
        return "failure", detail
    if d.preemptions:
        return "preemption", detail
    if slos and stats.slo_attainment is not None and stats.slo_attainment < SLO_SHARE:
        return "slo", detail
    return "ok", detail


async def concurrency(ctx: Ctx) -> StepResult:
    sessions = ctx.rs.sessions()
    k = ctx.steps_k()
    windows: list[Window] = []

    async def rung(c: int) -> Rung:
        if c in ctx.kept_rungs:
            kept, window = ctx.kept_rungs[c]
            windows.append(window)
            return kept
        label = f"concurrency_c{c}"
        ctx.progress.start(label, c * k)
        async with ctx.load.window(label) as out:
            await ctx.load.run_sessions(SessionBatch([sessions[i % len(sessions)][:k] for i in range(c)], c))
        ctx.progress.finish()
        windows.extend(out)
        verdict, detail = _rung_verdict(out[0], ctx.opts.slos)
        done = Rung(c, verdict, detail)
        # A rung the server died in is no measurement: it is not recorded, so --resume runs it again.
        if ctx.on_rung and not (verdict == "failure" and server_died(await _failure(ctx, out))):
            ctx.on_rung(done, out[0])
        return done

    rungs, ctx.knee = await find_knee(rung, ctx.opts.max_concurrency)
    failure = await _failure(ctx, windows[-1:]) if ctx.knee.reason == "failure" else None
    blind = () if ctx.load.scraper.available else ("no /metrics: preemptions cannot be seen, only errors and SLOs",)
    notes = blind + _window_notes(windows)
    detail: JsonObject = {"rungs": [r.to_dict() for r in rungs], "knee": ctx.knee.to_dict(), "steps_per_session": k}
    return from_windows("concurrency", windows, True, failure, notes, detail)


@dataclass(frozen=True)
class Mismatch:
    """A request the repeat step got a different answer to (detail.mismatches, keys in this order)."""

    step: str
    request_id: str
    first: str
    again: str
    error_kind: str | None


async def repeat(ctx: Ctx) -> StepResult:
    """Steps 1-3 again, twice, at temperature 0 with their fixed seeds: both runs must match."""
    names = [n for n in ("short_request", "tool_call", "agent_steps") if ctx.sent.get(n)]
    reqs = [(n, req) for n in names for req, _ in ctx.sent[n]]
    ctx.progress.start("repeat", 2 * len(reqs))
    mismatches: list[Mismatch] = []
    identical: dict[str, bool] = {n: True for n in names}
    async with ctx.load.window("repeat") as out:
        for name, req in reqs:
            first = await ctx.load.send(req, DETERMINISTIC)
            again = await ctx.load.send(req, DETERMINISTIC)
            ctx.progress.advance(2)
            if again.fingerprint() != first.fingerprint() or not (first.ok and again.ok):
                identical[name] = False
                mismatches.append(
                    Mismatch(name, req.id, first.content[:80], again.content[:80], first.error_kind or again.error_kind)
                )
    ctx.progress.finish()
    ok = bool(reqs) and not mismatches
    notes = tuple(f"{m.step} {m.request_id} differs" for m in mismatches[:3]) + _window_notes(out)
    detail = to_json_object(
        {"compared": len(reqs), "temperature": 0.0, "identical_by_step": identical, "mismatches": mismatches}
    )
    return from_windows("repeat", out, ok, await _failure(ctx, out), notes, detail)


STEPS = (
    ("short_request", short_request),
    ("tool_call", tool_call),
    ("agent_steps", agent_steps),
    ("history_doubling", history_doubling),
    ("concurrency", concurrency),
    ("repeat", repeat),
)
