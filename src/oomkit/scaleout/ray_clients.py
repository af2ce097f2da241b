"""Clients as Ray actors, spread over the cluster's nodes (SPREAD scheduling): each is an async
actor running the same streaming client as a local run, many requests at once. An actor that dies
raises on the driver's await: that request, and later ones routed to it, become `client_lost`."""

from __future__ import annotations

import time
from typing import Any

from oomkit.client.chat import ChatRequest
from oomkit.client.records import RequestRecord
from oomkit.scaleout.clients import (
    CLOCK_PROBES,
    ClientInfo,
    Endpoint,
    PoolSpec,
    Router,
    best_offset,
    lost_record,
    on_driver_clock,
    serve_requests,
)
from oomkit.scaleout.ray_backend import RayTarget, import_ray

MAX_REQUESTS_PER_ACTOR = 100_000


class ClientActor:
    """The actor's body; made remote in `RayPool.start` so Ray is imported only when asked for."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.client: Any = None

    async def where(self) -> str:
        import os

        import ray

        return f"ray:{ray.util.get_node_ip_address()}:{os.getpid()}"

    async def now(self) -> float:
        return time.time()

    async def chat(self, req: ChatRequest) -> RequestRecord:
        if self.client is None:
            self.client = await serve_requests(self.endpoint)
        return await self.client.chat(req)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.__aexit__()


class RayPool:
    def __init__(self, spec: PoolSpec, endpoint: Endpoint):
        self.spec, self.endpoint = spec, endpoint
        self.target = spec.ray or RayTarget()
        self._router = Router(spec.clients)
        self._actors: list[Any] = []
        self._where: list[str] = []
        self._offsets: list[float] = []
        self._lost: list[str | None] = []
        self._ray: Any = None
        self._started_ray = False

    async def start(self) -> None:
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            from oomkit.scaleout.ray_backend import init_kwargs

            ray.init(**init_kwargs(self.target, self.spec.clients))
            self._started_ray = True
        remote = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=MAX_REQUESTS_PER_ACTOR)(ClientActor)
        self._actors = [
            remote.options(scheduling_strategy="SPREAD").remote(self.endpoint) for _ in range(self.spec.clients)
        ]
        self._where = list(await _gather(actor.where.remote() for actor in self._actors))
        self._offsets = [await _offset(actor) for actor in self._actors]
        self._lost = [None] * len(self._actors)

    async def chat(self, req: ChatRequest) -> RequestRecord:
        index = self._router.pick(req)
        started = time.time()
        if self._lost[index]:
            return lost_record(req, started, f"client {index} died earlier: {self._lost[index]}")
        try:
            rec = await self._actors[index].chat.remote(req)
        except self._ray.exceptions.RayActorError as err:
            self._lost[index] = f"Ray actor {self._where[index]} died ({type(err).__name__})"
            return lost_record(req, started, self._lost[index] or "")
        return on_driver_clock(rec, self._offsets[index])

    def clients(self) -> tuple[ClientInfo, ...]:
        return tuple(
            ClientInfo(i, self._where[i], round(self._offsets[i], 6), self._lost[i]) for i in range(len(self._actors))
        )

    def actor(self, index: int) -> Any:
        """The actor handle (tests kill one mid-run with ray.kill)."""
        return self._actors[index]

    async def stop(self) -> None:
        for index, actor in enumerate(self._actors):
            if not self._lost[index]:
                try:
                    await actor.close.remote()
                except self._ray.exceptions.RayActorError:
                    pass
                self._ray.kill(actor)
        if self._started_ray:
            self._ray.shutdown()


async def _offset(actor: Any) -> float:
    probes = []
    for _ in range(CLOCK_PROBES):
        before = time.time()
        client_now = await actor.now.remote()
        probes.append((before, client_now, time.time()))
    return best_offset(probes)


async def _gather(refs: Any) -> list[Any]:
    import asyncio

    return list(await asyncio.gather(*refs))
