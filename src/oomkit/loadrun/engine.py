"""One load against one server: the streaming client, /metrics every second, memory every half
second, and the run folder's JSONL files. Every finished request is on disk at once, so a run
that dies (or is interrupted) keeps everything it did."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oomkit.client.chat import ChatClient, ChatRequest
from oomkit.client.probe import health
from oomkit.client.records import RequestRecord
from oomkit.fsio import JsonlWriter
from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.stats import ClientTally
from oomkit.metrics.deltas import MetricDeltas, compute
from oomkit.metrics.memory import MemorySampler, choose
from oomkit.metrics.scrape import Scraper
from oomkit.rundir import redact_obj
from oomkit.scaleout.clients import CLIENT_LOST, ClientPool
from oomkit.serial import Json, JsonObject
from oomkit.workload.requestset import SetRequest

# Errors after which the server cannot serve anything more (cpu-testbed.md §9: after an engine
# death /health is 503 and the API server exits; later connections are refused).
FATAL_KINDS = ("engine_dead", "refused")


def run_async(coro: Any) -> Any:
    """asyncio.run, on uvloop when it is installed (vLLM depends on it): the client then spends
    about a fifth less CPU per streamed token (benchmarks/client_overhead.py). Ctrl-C behaves the
    same: the main task is cancelled, then KeyboardInterrupt is raised."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@dataclass(frozen=True)
class Window:
    """What one labelled part of a run (a ladder step or rung, a bench) sent and caused."""

    label: str
    records: tuple[RequestRecord, ...]
    deltas: MetricDeltas
    peak_memory_bytes: int | None
    started_unix_s: float
    duration_s: float
    client: ClientTally = field(default_factory=ClientTally)
    """The client figures of every request sent in the window, also when `records` is not kept."""


@dataclass(frozen=True, slots=True)  # one per session is kept for the whole bench
class SessionOutcome:
    session: int
    steps_done: int
    steps_total: int
    ok: bool
    """Every step answered without error and every checked tool call was valid."""
    cut: bool
    """Stopped by the end of the run (duration, interrupt, dead server), not by its own failure."""
    error_kind: str | None = None


@dataclass
class _Open:
    label: str
    started: float
    mark: int
    records: list[RequestRecord] = field(default_factory=list)
    tally: ClientTally = field(default_factory=ClientTally)


@dataclass(frozen=True)
class SessionBatch:
    """The agent sessions one closed-loop run sends, and how."""

    sessions: list[list[SetRequest]]
    concurrency: int
    """Agents at once; each runs one session's steps in order."""
    deadline: float | None = None
    """A monotonic time: with it the sessions repeat until then; without, each runs once."""
    overrides: Mapping[str, Json] | None = None
    """Body fields set on every request (compare's client-side modes, a cell's cache_salt)."""
    skip: frozenset[int] = frozenset()
    """Sessions (by index) an earlier attempt finished: not run again."""


class Load:
    def __init__(
        self,
        ctx: LoadContext,
        *,
        keep_records: bool = True,
        pool: ClientPool | None = None,
        scrape_interval_s: float = 1.0,
        memory_interval_s: float = 0.5,
    ):
        self.ctx = ctx
        self.target, self.run = ctx.target, ctx.run_dir
        self.pool = pool
        """Client processes or Ray actors that stream the requests (--clients); None: this process."""
        self.keep_records = keep_records
        """False: a window keeps only its ClientTally (a long bench); every record is on disk anyway."""
        self.attempt = ctx.attempt
        self.scrape_interval_s, self.memory_interval_s = scrape_interval_s, memory_interval_s
        self.dead: RequestRecord | None = None
        self.memory_note = ""
        self._label = "setup"
        self._open: _Open | None = None
        self._writers: dict[str, JsonlWriter] = {}

    async def __aenter__(self) -> Load:
        self.client = ChatClient(self.target.base_url, self.target.model, self.target.api_key, self.ctx.client)
        self._writers = {
            "requests": self.run.jsonl("requests.jsonl", "every finished request: timings, usage, errors, tool checks"),
            "metrics": self.run.jsonl("metrics.jsonl", "/metrics scraped every second (vllm:* samples)"),
            # Not memory.jsonl: `oomkit launch` writes that one in the same folder.
            "memory": self.run.jsonl("load_memory.jsonl", "server memory samples during the load, per step"),
        }
        self.scraper = Scraper(
            self.client.http, self.target.base_url, self._sink("metrics"), self.scrape_interval_s, lambda: self._label
        )
        probe, self.memory_note = choose(self.ctx.memory, self.target.server_pid, self.target.base_url)
        self.sampler = (
            MemorySampler(probe, self._sink("memory"), self.memory_interval_s, lambda: self._label) if probe else None
        )
        self.scraper.start()
        if self.sampler:
            self.sampler.start()
        return self

    def _sink(self, name: str) -> Callable[[JsonObject], None]:
        writer = self._writers[name]
        return lambda line: writer.append({**line, "attempt": self.attempt})

    async def __aexit__(self, *exc: object) -> None:
        await self.scraper.stop()
        if self.sampler:
            await self.sampler.stop()
        await self.client.__aexit__()
        for w in self._writers.values():
            w.close()

    @contextlib.asynccontextmanager
    async def window(self, label: str) -> AsyncIterator[list[Window]]:
        """Collect what is sent inside the block; the Window is appended to the yielded list."""
        out: list[Window] = []
        self._label = label
        opened = _Open(label, time.time(), self.scraper.mark())
        self._open = opened
        await self._sample()
        try:
            yield out
        finally:
            await self._sample()
            self._open = None
            peak = self.sampler.peaks.get(label) if self.sampler else None
            out.append(
                Window(
                    label,
                    tuple(opened.records),
                    compute(self.scraper.since(opened.mark)),
                    peak,
                    opened.started,
                    time.time() - opened.started,
                    opened.tally,
                )
            )

    async def _sample(self) -> None:
        await self.scraper.scrape_now()
        if self.sampler:
            with contextlib.suppress(Exception):
                await self.sampler.sample_now()

    async def send(
        self,
        req: SetRequest,
        overrides: Mapping[str, Json] | None = None,
        label: str | None = None,
        run_session: int | None = None,
    ) -> RequestRecord:
        """Send one request and record it; `run_session` is the index of the session in the run
        (a bench resumed later counts the records of the sessions that finished)."""
        body = {**req.body, **(overrides or {})}
        chat = ChatRequest(req.id, body, label or self._label, req.session, req.step)
        tags: dict[str, str | int] = {"kind": req.kind, "attempt": self.attempt}
        if run_session is not None:
            tags["run_session"] = run_session
        started = time.time()
        try:
            rec = await (self.pool.chat(chat) if self.pool is not None else self.client.chat(chat))
        except asyncio.CancelledError:
            # Ctrl-C: say which requests were in flight, then let the cancellation through.
            cut = RequestRecord(
                req.id,
                chat.label,
                req.session,
                req.step,
                started,
                False,
                error_kind="interrupted",
                error="interrupted while in flight",
            )
            self._writers["requests"].append({**cut.to_dict(), **tags})
            raise
        self._writers["requests"].append(redact_obj({**rec.to_dict(), **tags}))
        if self._open is not None:
            self._open.tally.add(rec)
            if self.keep_records:
                self._open.records.append(rec)
        if not rec.ok and rec.error_kind in FATAL_KINDS and self.dead is None:
            if await asyncio.to_thread(health, self.target.base_url) != 200:
                self.dead = rec
        return rec

    async def run_sessions(
        self, batch: SessionBatch, on_outcome: Callable[[SessionOutcome], None] | None = None
    ) -> list[SessionOutcome]:
        """Closed loop: `batch.concurrency` agents, each running a session's steps in order (a step
        starts when the previous one has answered); with a deadline the sessions repeat until it.
        Each outcome goes to `on_outcome` as its session ends, so a caller that is interrupted
        still has those that finished. Every request advances the context's progress."""
        pending = [(i, s) for i, s in enumerate(batch.sessions) if i not in batch.skip]
        cycle = batch.deadline is not None
        source: Iterable[tuple[int, list[SetRequest]]] = itertools.cycle(pending) if cycle else iter(pending)
        outcomes: list[SessionOutcome] = []

        async def agent() -> None:
            for index, steps in source:
                if self._stopped(batch.deadline):
                    return
                outcome = await self._session(index, steps, batch)
                outcomes.append(outcome)
                if on_outcome:
                    on_outcome(outcome)

        await asyncio.gather(*(agent() for _ in range(max(1, batch.concurrency))))
        return outcomes

    def _stopped(self, deadline: float | None) -> bool:
        return self.dead is not None or (deadline is not None and time.monotonic() >= deadline)

    async def _session(self, index: int, steps: list[SetRequest], batch: SessionBatch) -> SessionOutcome:
        valid = True
        for done, req in enumerate(steps):
            if self._stopped(batch.deadline):
                return SessionOutcome(index, done, len(steps), False, cut=True)
            rec = await self.send(req, batch.overrides, run_session=index)
            self.ctx.progress.advance()
            if not rec.ok:
                # A session whose client died was stopped from outside, like one cut by the clock.
                lost = rec.error_kind == CLIENT_LOST
                return SessionOutcome(index, done, len(steps), False, cut=lost, error_kind=rec.error_kind)
            valid = valid and (rec.tool_check is None or rec.tool_check.valid)
        return SessionOutcome(index, len(steps), len(steps), valid, cut=False)
