"""Cells: one mode, one repeat, against one server. Before each cell the prefix cache is reset
(POST /reset_prefix_cache, which vLLM serves only with VLLM_SERVER_DEV_MODE=1) or, where the
server has no such endpoint, the cell's requests carry their own `cache_salt`, so one cell cannot
warm the next. Every finished cell is appended to cells.jsonl at once (resume skips it). A cell
during which the server died is recorded too, with `failure` and its evidence; it is no
measurement: verdicts leave it out and resume runs it again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import cast

from oomkit.client.records import RequestRecord
from oomkit.compare.clientside import concurrency_for, overrides_for, sessions_for
from oomkit.compare.document import CellDoc
from oomkit.compare.spec import Mode
from oomkit.errors import UsageError
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.engine import Load, SessionBatch, SessionOutcome, Window
from oomkit.loadrun.failure import classify
from oomkit.loadrun.result import AgentStats
from oomkit.loadrun.stats import percentile, summarise
from oomkit.serial import JsonObject

RESET_PATH = "/reset_prefix_cache"


@dataclass(frozen=True)
class Cell:
    mode: str
    repeat: int
    label: str
    server_run: str
    concurrency: int
    reset: str
    """endpoint (the server's cache was emptied), salt (cache_salt per cell) or none."""
    salt: str | None
    requests: int
    errors: int
    errors_by_kind: dict[str, int]
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    session_ms_p95: float | None
    """Full response time of an agent loop: its first request sent to its last token."""
    peak_memory_bytes: int | None
    max_kv_usage: float | None
    preemptions: float | None
    prefix_cache_hit_rate: float | None
    cached_tokens: int | None
    prompt_tokens: int
    agents_total: int
    agents_succeeded: int
    agent_success_share: float | None
    started_unix_s: float
    duration_s: float
    failure: JsonObject | None = None
    """Set when the server died during the cell: kind, phase, reason, evidence (loadrun.failure)."""

    def to_dict(self) -> CellDoc:
        # The fields are CellDoc's keys, in order (tests/test_compare.py holds them equal).
        return cast(CellDoc, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()})


def session_times_ms(records: tuple[RequestRecord, ...]) -> list[float]:
    """Per agent loop: first request start to last token. A session id seen again after its last
    step is a new loop (cells repeat the set's sessions when asked for more)."""
    loops: dict[int, list[list[RequestRecord]]] = {}
    in_sessions = ((r.session, r) for r in records if r.session is not None)
    for session, rec in sorted(in_sessions, key=lambda pair: pair[1].started_unix_s):
        runs = loops.setdefault(session, [[]])
        if runs[-1] and (rec.step or 0) <= (runs[-1][-1].step or 0):
            runs.append([])
        runs[-1].append(rec)
    out = []
    for runs in loops.values():
        for run in runs:
            ends = [r.started_unix_s + (r.latency_ms or 0) / 1000 for r in run]
            out.append((max(ends) - run[0].started_unix_s) * 1000)
    return out


@dataclass(frozen=True)
class CellSetup:
    """What a cell is before it runs: its mode and repeat, how it loads, how the cache was emptied."""

    mode: Mode
    repeat: int
    concurrency: int
    reset: str
    salt: str | None
    server_run: str
    """The folder of the server the cell ran on (its requests.jsonl and metrics.jsonl)."""


def cell_from(setup: CellSetup, window: Window, outcomes: list[SessionOutcome]) -> Cell:
    stats = summarise(window.records, window.duration_s)
    agents = AgentStats.of(outcomes)
    d = window.deltas
    return Cell(
        setup.mode.name,
        setup.repeat,
        window.label,
        setup.server_run,
        setup.concurrency,
        setup.reset,
        setup.salt,
        stats.requests,
        stats.errors,
        stats.errors_by_kind,
        stats.ttft_ms_p50,
        stats.ttft_ms_p95,
        stats.latency_ms_p50,
        stats.latency_ms_p95,
        percentile(session_times_ms(window.records), 95),
        window.peak_memory_bytes,
        d.max_kv_usage,
        d.preemptions,
        d.prefix_cache_hit_rate,
        stats.cached_tokens,
        stats.prompt_tokens,
        agents.sessions,
        agents.succeeded,
        agents.success_share,
        window.started_unix_s,
        window.duration_s,
    )


async def try_reset(load: Load) -> bool:
    try:
        resp = await load.client.http.post(RESET_PATH)
    except Exception:
        return False
    return resp.status_code == 200


async def reset_method(load: Load, wanted: str) -> str:
    if wanted in ("salt", "none"):
        return wanted
    if await try_reset(load):
        return "endpoint"
    if wanted == "endpoint":
        raise UsageError(
            f"{load.target.base_url} has no POST {RESET_PATH} (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)",
            hint="set that in the profile's env, or use reset: salt",
        )
    return "salt"


@dataclass(frozen=True)
class GroupJob:
    """The cells one server runs: its modes, the repeats, what is already done."""

    modes: tuple[Mode, ...]
    repeats: int
    baseline_concurrency: int
    sessions: int | None
    steps: int | None
    reset: str
    experiment_id: str
    done: frozenset[tuple[str, int]]


async def run_group(ctx: LoadContext, job: GroupJob, on_cell: Callable[[Cell], None]) -> list[Cell]:
    """Repeats outermost, modes inside: drift over time hits every mode alike."""
    cells: list[Cell] = []
    async with Load(ctx) as load:
        method = await reset_method(load, job.reset)
        for repeat in range(1, job.repeats + 1):
            for mode in job.modes:
                if (mode.name, repeat) in job.done:
                    continue
                cell, window = await _one_cell(load, job, mode, repeat, method)
                if load.dead is not None:
                    cell = replace(cell, failure=await _why_dead(load, window))
                cells.append(cell)
                on_cell(cell)
                if cell.failure:
                    return cells
    return cells


async def _why_dead(load: Load, window: Window) -> JsonObject:
    """The server died during this cell: why, from its log when oomkit launched it."""
    assert load.dead is not None
    failure = await asyncio.to_thread(classify, window.records or (load.dead,), load.target, window.deltas)
    return failure.to_dict() if failure else {"kind": load.dead.error_kind, "reason": load.dead.error}


async def _one_cell(load: Load, job: GroupJob, mode: Mode, repeat: int, method: str) -> tuple[Cell, Window]:
    salt = None
    if method == "endpoint":
        await try_reset(load)
    elif method == "salt":
        salt = f"oomkit-{job.experiment_id}-{mode.name}-{repeat}-{int(time.time())}"[:128]
    overrides = {**overrides_for(mode), **({"cache_salt": salt} if salt else {})}
    sessions = sessions_for(load.ctx.request_set, mode, job.sessions, job.steps)
    concurrency = concurrency_for(mode, job.baseline_concurrency)
    async with load.window(f"{mode.name}#{repeat}") as out:
        outcomes = await load.run_sessions(SessionBatch(sessions, concurrency, overrides=overrides))
    setup = CellSetup(mode, repeat, concurrency, method, salt, str(load.ctx.run_dir.path))
    return cell_from(setup, out[0], outcomes), out[0]
