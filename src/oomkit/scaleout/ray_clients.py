"""Clients as Ray actors, spread over the cluster's nodes (SPREAD scheduling): each is an async
actor running a `Worker`, many requests at once. Batches of requests and records travel over a
direct TCP link to the driver (`link`), with one `watch` call open per actor that fails when Ray
sees the actor die. An actor that cannot reach the driver (or every actor, with OOMKIT_RAY_LINK=0)
uses Ray calls instead: a fire-and-forget `submit` per batch of requests and one `take` call open at
a time, which returns every record finished since the last one, the requests that those records'
agents ask next riding along with the next `take`. Either way no timer is waited on. An actor that
dies ends its link or fails its open call: its unfinished requests, those whose records it had not
yet sent, and later ones routed to it, become `client_lost`."""

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
from oomkit.scaleout.link import CONNECT_TIMEOUT_S, LinkAddress, LinkServer, connect, frame, read_frame
from oomkit.scaleout.ray_backend import ANSI, RayTarget, import_ray, init_kwargs

MAX_CALLS_PER_ACTOR = 1_000  # at most one take (or watch) and a few submits are open at once
DRAIN_AFTER_DEATH_S = 5.0  # records already on the wire when Ray reports a death are still read


class ClientActor:
    """The actor's body; made remote in `RayPool.start` so Ray is imported only when asked for."""

    def __init__(self, index: int, endpoint: Endpoint):
        self.worker = Worker(index, endpoint)
        self._link_tasks: list[asyncio.Task[None]] = []

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

    async def link(self, address: LinkAddress) -> bool:
        """Connects to the driver; from then on batches come and records go over the link."""
        connection = await connect(address, self.worker.index)
        if connection is None:
            return False
        reader, writer = connection
        loop = asyncio.get_running_loop()
        self._link_tasks = [loop.create_task(self._read_link(reader)), loop.create_task(self._send_link(writer))]
        return True

    async def _read_link(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                self.worker.submit(await read_frame(reader))

    async def _send_link(self, writer: asyncio.StreamWriter) -> None:
        """Whatever finished since the last frame goes as one frame. The link closes when this
        stops for any reason: the driver then counts what is unanswered as lost, never waits."""
        try:
            while True:
                writer.write(frame(await self.worker.take()))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def watch(self) -> None:
        """Never returns: the driver keeps this call open to hear from Ray when the actor dies."""
        await asyncio.Event().wait()

    async def unlink(self) -> None:
        """Stops using the link (the driver did not register it): records then wait for `take`."""
        for task in self._link_tasks:
            task.cancel()
        await asyncio.gather(*self._link_tasks, return_exceptions=True)
        self._link_tasks = []

    async def close(self) -> None:
        await self.unlink()
        await self.worker.close()


class RayPool:
    def __init__(self, spec: PoolSpec, endpoint: Endpoint):
        self.spec, self.endpoint = spec, endpoint
        self.target = spec.ray or RayTarget()
        self._dispatch = Dispatcher(spec.clients, self._send)
        self._actors: list[Any] = []
        self._takers: list[asyncio.Task[None]] = []
        self._links = LinkServer(self._dispatch.resolve, self._link_ended)
        self._linked: set[int] = set()
        self._stopping = False
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
        if os.environ.get("OOMKIT_RAY_LINK", "1") != "0":
            self._linked = await self._link()
        for index, slot in enumerate(self._dispatch.slots):
            slot.via = "socket" if index in self._linked else "ray calls"
            receive = self._watch if index in self._linked else self._take_records
            self._takers.append(asyncio.create_task(receive(index)))

    async def _link(self) -> set[int]:
        """The actors that reached the driver's link; the others keep to Ray calls."""
        try:
            address = await self._links.start(self._ray.util.get_node_ip_address())
        except OSError:
            return set()
        # An actor that dies meanwhile answers with an error: it stays on calls, whose take sees it.
        linked = await asyncio.gather(*(actor.link.remote(address) for actor in self._actors), return_exceptions=True)
        reached = set()
        for index, ok in enumerate(linked):
            if ok is not True:
                continue
            try:
                await asyncio.wait_for(asyncio.shield(self._links.expect(index)), CONNECT_TIMEOUT_S)
                reached.add(index)
            except TimeoutError:
                # Connected but never registered: the actor must not keep a second taker of records
                # (one that died meanwhile is seen by its take).
                with contextlib.suppress(self._ray.exceptions.RayError):
                    await self._actors[index].unlink.remote()
        return reached

    async def chat(self, req: ChatRequest) -> RequestRecord:
        return await self._dispatch.chat(req)

    def clients(self) -> tuple[ClientInfo, ...]:
        return self._dispatch.clients()

    def actor(self, index: int) -> Any:
        """The actor handle (tests kill one mid-run with ray.kill)."""
        return self._actors[index]

    def _send(self, index: int, batch: Batch) -> None:
        if index in self._linked:
            # A link that has ended drops the batch: its requests end as losses with the actor.
            self._links.send(index, batch)
        else:
            # Fire and forget: a submit to a dead actor is seen by its open take, which fails.
            self._actors[index].submit.remote(batch)

    def _link_ended(self, index: int) -> None:
        if not self._stopping:
            where = self._dispatch.slots[index].where
            self._dispatch.fail(index, f"Ray actor {where} died (its link to the driver ended)")

    async def _watch(self, index: int) -> None:
        """Hears from Ray when a linked actor dies; the records it had sent are read first."""
        try:
            await self._actors[index].watch.remote()
        except self._ray.exceptions.RayError as err:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._links.ended(index)), DRAIN_AFTER_DEATH_S)
            self._dispatch.fail(index, _died(self._dispatch.slots[index].where, err))

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
        self._stopping = True
        await self._links.close()
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
