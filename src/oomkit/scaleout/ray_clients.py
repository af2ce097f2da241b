"""Clients as Ray actors, spread over the cluster's nodes (SPREAD scheduling): each is an async
actor running a `Worker`, many requests at once. The driver sends each actor its requests in batches
(one fire-and-forget `submit` call per batch) and keeps one `take` call open per actor, which returns
every record finished since the last one; the requests that those records' agents ask next ride
along with the next `take`. A few actor calls per batch of records, not one per request, and no
timer to wait on. An actor that dies fails its open `take`: its unfinished requests, those whose
records it had not yet returned, and later ones routed to it, become `client_lost`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from oomkit.client.chat import ChatRequest
from oomkit.client.records import RequestRecord
from oomkit.scaleout.clients import (
    CLOCK_PROBES,
    Batch,
    ClientInfo,
    Dispatcher,
    Endpoint,
    Finished,
    PoolSpec,
    Worker,
    best_offset,
)
from oomkit.scaleout.ray_backend import ANSI, RayTarget, import_ray, init_kwargs

MAX_CALLS_PER_ACTOR = 1_000  # at most one take and a few submits are open at once


class ClientActor:
    """The actor's body; made remote in `RayPool.start` so Ray is imported only when asked for."""

    def __init__(self, index: int, endpoint: Endpoint):
        self.worker = Worker(index, endpoint)

    async def where(self) -> str:
        import ray

        await self.worker.open()
        return f"ray:{ray.util.get_node_ip_address()}:{os.getpid()}"

    async def now(self) -> float:
        return time.time()

    async def submit(self, batch: Batch) -> None:
        self.worker.submit(batch)

    async def take(self, batch: Batch) -> Finished:
        """Submits the requests that ride along (often none), then waits for records."""
        self.worker.submit(batch)
        return await self.worker.take()

    async def close(self) -> None:
        await self.worker.close()


class RayPool:
    def __init__(self, spec: PoolSpec, endpoint: Endpoint):
        self.spec, self.endpoint = spec, endpoint
        self.target = spec.ray or RayTarget()
        self._dispatch = Dispatcher(spec.clients, self._send)
        self._actors: list[Any] = []
        self._takers: list[asyncio.Task[None]] = []
        self._ray: Any = None
        self._started_ray = False

    async def start(self) -> None:
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            ray.init(**init_kwargs(self.target, self.spec.clients))
            self._started_ray = True
        remote = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=MAX_CALLS_PER_ACTOR)(ClientActor)
        self._actors = [
            remote.options(scheduling_strategy="SPREAD").remote(i, self.endpoint) for i in range(self.spec.clients)
        ]
        wheres = await asyncio.gather(*(actor.where.remote() for actor in self._actors))
        for slot, actor, where in zip(self._dispatch.slots, self._actors, wheres, strict=True):
            slot.where, slot.offset_s = where, await _offset(actor)
        self._takers = [asyncio.create_task(self._take_records(i)) for i in range(len(self._actors))]

    async def chat(self, req: ChatRequest) -> RequestRecord:
        return await self._dispatch.chat(req)

    def clients(self) -> tuple[ClientInfo, ...]:
        return self._dispatch.clients()

    def actor(self, index: int) -> Any:
        """The actor handle (tests kill one mid-run with ray.kill)."""
        return self._actors[index]

    def _send(self, index: int, batch: Batch) -> None:
        # Fire and forget: a submit to a dead actor is seen by its open take, which fails.
        self._actors[index].submit.remote(batch)

    async def _take_records(self, index: int) -> None:
        """One take open at a time per actor: records come back as fast as the driver reads them,
        in batches that grow with the rate."""
        actor, batch = self._actors[index], Batch()
        while True:
            try:
                finished = await actor.take.remote(batch)
            except self._ray.exceptions.RayError as err:
                self._dispatch.fail(index, _died(self._dispatch.slots[index].where, err))
                return
            self._dispatch.resolve(index, finished)
            # The woken agents run first and ask their next requests; the dispatcher's own flush
            # comes after this task's turn, so those requests are still there to take along.
            await asyncio.sleep(0)
            batch = self._dispatch.take_outgoing(index)

    async def stop(self) -> None:
        for task in self._takers:
            task.cancel()
        await asyncio.gather(*self._takers, return_exceptions=True)
        for slot, actor in zip(self._dispatch.slots, self._actors, strict=True):
            if not slot.lost:
                with contextlib.suppress(self._ray.exceptions.RayError):
                    await actor.close.remote()
                self._ray.kill(actor)
        if self._started_ray:
            self._ray.shutdown()


def _died(where: str, err: Exception) -> str:
    if isinstance(err, import_ray().exceptions.RayActorError):
        return f"Ray actor {where} died ({type(err).__name__})"
    text = ANSI.sub("", str(err)).strip()
    return f"Ray actor {where} failed: {type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"


async def _offset(actor: Any) -> float:
    probes = []
    for _ in range(CLOCK_PROBES):
        before = time.time()
        client_now = await actor.now.remote()
        probes.append((before, client_now, time.time()))
    return best_offset(probes)
