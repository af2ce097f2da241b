"""Load from several client processes into one run: a pool of clients that each stream their share
of the requests, while the driver keeps the one run folder, the one /metrics scraper and the one
request log. A client is a local process (`--clients N`) or a Ray actor spread over the cluster's
nodes (`--clients N --ray [ADDRESS]`).

Both kinds share the two ends of the exchange: `Dispatcher` on the driver and `Worker` in the client.
Requests travel in batches (all those asked in one turn of the driver's event loop, one message per
client) and records come back in batches (all those finished since the driver last took them), so
a short answer does not pay a round trip of its own; nothing waits on a timer, so a lone request is
not delayed either.

Every record is put on the driver's clock: each client's offset is measured at start (a round trip,
the midpoint taken as the client's moment) and subtracted from the times it reports. A client that
dies keeps the records it already sent back; its unfinished requests (and those whose records it
had not yet sent), and any later request routed to it, end as `client_lost` records — a loss on the
client side, never a server error."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from oomkit.client.chat import ChatClient, ChatRequest, ClientOptions
from oomkit.client.records import RequestRecord
from oomkit.scaleout.ray_backend import RayTarget

CLIENT_LOST = "client_lost"

Batch = list[tuple[int, ChatRequest]]
"""Requests for one client, each with the driver's token for it."""
Finished = list[tuple[int, RequestRecord]]
"""Records a client finished, each with the token of its request."""


@dataclass(frozen=True)
class PoolSpec:
    """How many clients and where: local processes, or Ray actors when `ray` is set."""

    clients: int
    ray: RayTarget | None = None


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str | None
    api_key: str | None
    options: ClientOptions


@dataclass(frozen=True)
class ClientInfo:
    """One client as the run folder records it."""

    index: int
    where: str
    clock_offset_s: float
    """The client's clock minus the driver's, measured at start; subtracted from its times."""
    lost: str | None = None
    """Why it died, when it did."""
    records_via: str = ""
    """How batches travel: "pipe" (local process), "socket" (Ray actor linked to the driver) or
    "ray calls" (a Ray actor that could not reach the driver)."""


class ClientPool(Protocol):
    async def chat(self, req: ChatRequest) -> RequestRecord: ...

    def clients(self) -> tuple[ClientInfo, ...]: ...


def lost_record(req: ChatRequest, started_unix_s: float, why: str) -> RequestRecord:
    return RequestRecord(
        req.request_id, req.label, req.session, req.step, started_unix_s, False, error_kind=CLIENT_LOST, error=why
    )


def on_driver_clock(rec: RequestRecord, offset_s: float) -> RequestRecord:
    return rec if offset_s == 0 else replace(rec, started_unix_s=rec.started_unix_s - offset_s)


class Router:
    """A session's steps always go to the same client (its history and order stay on one host);
    requests without a session go round-robin."""

    def __init__(self, clients: int):
        self.clients = clients
        self._next = itertools.cycle(range(clients))

    def pick(self, req: ChatRequest) -> int:
        return req.session % self.clients if req.session is not None else next(self._next)


def measure_offset(driver_before_s: float, client_now_s: float, driver_after_s: float) -> float:
    return client_now_s - (driver_before_s + driver_after_s) / 2


CLOCK_PROBES = 3


def best_offset(probes: list[tuple[float, float, float]]) -> float:
    """The offset of the probe (driver before, client now, driver after) with the shortest round
    trip, as NTP does: the first answer may wait for the client process to start, and half of that
    wait would otherwise land in the offset."""
    before, client_now, after = min(probes, key=lambda p: p[2] - p[0])
    return measure_offset(before, client_now, after)


@asynccontextmanager
async def open_pool(spec: PoolSpec, endpoint: Endpoint) -> AsyncIterator[ClientPool]:
    """The pool for the spec, started and clock-synchronised; stopped on exit."""
    if spec.clients < 1:
        raise ValueError("clients must be at least 1")
    if spec.ray is not None:
        from oomkit.scaleout.ray_clients import RayPool

        pool: Any = RayPool(spec, endpoint)
    else:
        from oomkit.scaleout.process_clients import ProcessPool

        pool = ProcessPool(spec, endpoint)
    await pool.start()
    try:
        yield pool
    finally:
        await pool.stop()


def now_s() -> float:
    return time.time()


def run_loop(coro: Any) -> Any:
    """asyncio.run on uvloop when installed (vLLM depends on it), as the single-process client does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@dataclass
class _Slot:
    """The driver's side of one client."""

    index: int
    where: str = "?"
    offset_s: float = 0.0
    lost: str | None = None
    via: str = ""
    pending: dict[int, tuple[asyncio.Future[RequestRecord], ChatRequest, float]] = field(default_factory=dict)
    outgoing: Batch = field(default_factory=list)


class Dispatcher:
    """The driver's end of every pool: routes each request to its client, sends the requests asked
    in one turn of the event loop to a client as one batch (`send(index, batch)`, the transport's),
    and answers each request when its record comes back or its client dies. Used on the driver's
    event loop only: a transport that reads on a thread hands over with `call_soon_threadsafe`."""

    def __init__(self, clients: int, send: Callable[[int, Batch], None]):
        self.slots = [_Slot(i) for i in range(clients)]
        self._send = send
        self._router = Router(clients)
        self._tokens = itertools.count()

    async def chat(self, req: ChatRequest) -> RequestRecord:
        slot = self.slots[self._router.pick(req)]
        started = time.time()
        if slot.lost:
            return lost_record(req, started, f"client {slot.index} died earlier: {slot.lost}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RequestRecord] = loop.create_future()
        token = next(self._tokens)
        slot.pending[token] = (future, req, started)
        if not slot.outgoing:
            # After the callbacks already due: the agents woken by the same batch of records ask
            # their next requests first, and they all go in one message.
            loop.call_soon(self._flush, slot)
        slot.outgoing.append((token, req))
        return await future

    def _flush(self, slot: _Slot) -> None:
        batch = self.take_outgoing(slot.index)
        if batch and slot.lost is None:
            self._send(slot.index, batch)

    def take_outgoing(self, index: int) -> Batch:
        """The requests not yet sent to the client, now the caller's to send (a transport that has a
        message of its own about to go to that client takes them along; `send` is not called)."""
        slot = self.slots[index]
        batch, slot.outgoing = slot.outgoing, []
        return batch

    def resolve(self, index: int, finished: Finished) -> None:
        slot = self.slots[index]
        for token, rec in finished:
            entry = slot.pending.pop(token, None)
            if entry is not None and not entry[0].done():
                entry[0].set_result(on_driver_clock(rec, slot.offset_s))

    def fail(self, index: int, why: str) -> None:
        """The client died: every request it has not answered ends as a client loss."""
        slot = self.slots[index]
        if slot.lost is not None:
            return
        slot.lost, slot.outgoing = why, []
        pending, slot.pending = slot.pending, {}
        for future, req, started in pending.values():
            if not future.done():
                future.set_result(lost_record(req, started, why))

    def clients(self) -> tuple[ClientInfo, ...]:
        return tuple(ClientInfo(s.index, s.where, round(s.offset_s, 6), s.lost, s.via) for s in self.slots)


class Worker:
    """The client's end of every pool: runs each request of a batch at once on the same streaming
    client a single-process run uses, and keeps the finished records until the transport takes
    them (a record not yet taken when the client dies is lost with it, and counted as lost)."""

    def __init__(self, index: int, endpoint: Endpoint):
        self.index, self.endpoint = index, endpoint
        self._client: ChatClient | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._finished: Finished = []
        self._ready = asyncio.Event()

    async def open(self) -> None:
        if self._client is None:
            e = self.endpoint
            self._client = ChatClient(e.base_url, e.model, e.api_key, e.options)

    def submit(self, batch: Batch) -> None:
        loop = asyncio.get_running_loop()
        for token, req in batch:
            task = loop.create_task(self._one(token, req))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _one(self, token: int, req: ChatRequest) -> None:
        started = time.time()
        try:
            assert self._client is not None, "Worker.open() first"
            rec = await self._client.chat(req)
        except Exception as err:  # noqa: BLE001 - a bug in the client must not leave the driver waiting
            rec = lost_record(req, started, f"client {self.index} failed: {type(err).__name__}: {err}")
        self._finished.append((token, rec))
        self._ready.set()

    async def take(self) -> Finished:
        """The records finished since the last take; waits for at least one."""
        await self._ready.wait()
        return self.take_now()

    def take_now(self) -> Finished:
        self._ready.clear()
        finished, self._finished = self._finished, []
        return finished

    async def close(self) -> None:
        """Stops what still runs (nothing, unless the run was interrupted: the driver no longer
        waits for those records) and closes the client."""
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._client is not None:
            await self._client.__aexit__()
            self._client = None
