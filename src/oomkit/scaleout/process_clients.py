"""Clients as local processes: each runs its own event loop and streaming client; requests go to it
over a queue and records come back over one shared queue, read by a thread on the driver that also
watches every client process for death."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import get_context
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
    run_loop,
    serve_requests,
)

WATCH_INTERVAL_S = 0.2
CLOCK_TIMEOUT_S = 60.0  # a spawned client imports httpx and oomkit's client first


@dataclass
class _Client:
    index: int
    process: Any
    inbox: Any
    offset_s: float = 0.0
    lost: str | None = None
    pending: dict[int, tuple[asyncio.Future[RequestRecord], ChatRequest, float]] = field(default_factory=dict)


class ProcessPool:
    def __init__(self, spec: PoolSpec, endpoint: Endpoint):
        self.spec, self.endpoint = spec, endpoint
        self._ctx = get_context("spawn")  # the driver holds threads (scraper, sampler): no fork
        self._outbox: Any = self._ctx.Queue()
        self._clients: list[_Client] = []
        self._router = Router(spec.clients)
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._clock_replies: queue.Queue[tuple[int, float]] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: threading.Thread | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for index in range(self.spec.clients):
            inbox = self._ctx.Queue()
            process = self._ctx.Process(
                target=client_main,
                args=(index, inbox, self._outbox, self.endpoint),
                name=f"oomkit-client-{index}",
                daemon=True,
            )
            process.start()
            self._clients.append(_Client(index, process, inbox))
        self._reader = threading.Thread(target=self._read, name="oomkit-client-records", daemon=True)
        self._reader.start()
        await asyncio.to_thread(self._sync_clocks)

    def _sync_clocks(self) -> None:
        for client in self._clients:
            probes = []
            for _ in range(CLOCK_PROBES):
                before = time.time()
                client.inbox.put(("clock", 0, None))
                try:
                    _, client_now = self._clock_replies.get(timeout=CLOCK_TIMEOUT_S)
                except queue.Empty:
                    client.lost = "no answer to the clock check within 60 s"
                    break
                probes.append((before, client_now, time.time()))
            if not client.lost:
                client.offset_s = best_offset(probes)

    async def chat(self, req: ChatRequest) -> RequestRecord:
        client = self._clients[self._router.pick(req)]
        started = time.time()
        assert self._loop is not None
        future: asyncio.Future[RequestRecord] = self._loop.create_future()
        with self._lock:
            if client.lost:
                return lost_record(req, started, f"client {client.index} died earlier: {client.lost}")
            token = next(self._tokens)
            client.pending[token] = (future, req, started)
        client.inbox.put(("chat", token, req))
        return await future

    def clients(self) -> tuple[ClientInfo, ...]:
        return tuple(ClientInfo(c.index, f"local:{c.process.pid}", round(c.offset_s, 6), c.lost) for c in self._clients)

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                kind, index, token, payload = self._outbox.get(timeout=WATCH_INTERVAL_S)
            except queue.Empty:
                self._watch()
                continue
            if kind == "clock":
                self._clock_replies.put((index, payload))
            else:
                self._resolve(self._clients[index], token, payload)

    def _resolve(self, client: _Client, token: int, rec: RequestRecord) -> None:
        with self._lock:
            entry = client.pending.pop(token, None)
        if entry is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_set, entry[0], on_driver_clock(rec, client.offset_s))

    def _watch(self) -> None:
        for client in self._clients:
            if client.lost is None and not client.process.is_alive():
                self._fail(client, f"client process {client.process.pid} exited with {client.process.exitcode}")

    def _fail(self, client: _Client, why: str) -> None:
        with self._lock:
            client.lost = why
            pending, client.pending = client.pending, {}
        for future, req, started in pending.values():
            if self._loop is not None:
                self._loop.call_soon_threadsafe(_set, future, lost_record(req, started, why))

    async def stop(self) -> None:
        for client in self._clients:
            if client.lost is None:
                client.inbox.put(("stop", 0, None))
        await asyncio.to_thread(self._join)
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _join(self) -> None:
        for client in self._clients:
            client.process.join(timeout=10)
            if client.process.is_alive():
                client.process.kill()
                client.process.join(timeout=5)


def _set(future: asyncio.Future[RequestRecord], rec: RequestRecord) -> None:
    if not future.done():
        future.set_result(rec)


def client_main(index: int, inbox: Any, outbox: Any, endpoint: Endpoint) -> None:
    """The client process: serve requests from the inbox until told to stop."""
    run_loop(_serve(index, inbox, outbox, endpoint))


async def _serve(index: int, inbox: Any, outbox: Any, endpoint: Endpoint) -> None:
    client = await serve_requests(endpoint)
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()
    async with client:
        while True:
            kind, token, payload = await loop.run_in_executor(None, inbox.get)
            if kind == "stop":
                break
            if kind == "clock":
                outbox.put(("clock", index, 0, time.time()))
                continue
            task = loop.create_task(_one(client, index, token, payload, outbox))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)


async def _one(client: Any, index: int, token: int, req: ChatRequest, outbox: Any) -> None:
    started = time.time()
    try:
        rec = await client.chat(req)
    except Exception as err:  # noqa: BLE001 - a bug in the client must not leave the driver waiting
        rec = lost_record(req, started, f"client {index} failed: {type(err).__name__}: {err}")
    outbox.put(("record", index, token, rec))
