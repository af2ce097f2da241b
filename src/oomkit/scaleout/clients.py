"""Load from several client processes into one run: a pool of clients that each stream their share
of the requests, while the driver keeps the one run folder, the one /metrics scraper and the one
request log. A client is a local process (`--clients N`) or a Ray actor spread over the cluster's
nodes (`--clients N --ray [ADDRESS]`).

Every record is put on the driver's clock: each client's offset is measured at start (a round trip,
the midpoint taken as the client's moment) and subtracted from the times it reports. A client that
dies keeps the records it already sent back; its unfinished requests, and any later request routed
to it, end as `client_lost` records — a loss on the client side, never a server error."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from oomkit.client.chat import ChatClient, ChatRequest, ClientOptions
from oomkit.client.records import RequestRecord
from oomkit.scaleout.ray_backend import RayTarget

CLIENT_LOST = "client_lost"


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


async def serve_requests(endpoint: Endpoint) -> ChatClient:
    """The client a worker uses: the same streaming client a single-process run uses."""
    return ChatClient(endpoint.base_url, endpoint.model, endpoint.api_key, endpoint.options)


def now_s() -> float:
    return time.time()


def run_loop(coro: Any) -> Any:
    """asyncio.run on uvloop when installed (vLLM depends on it), as the single-process client does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
