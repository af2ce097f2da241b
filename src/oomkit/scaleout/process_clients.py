"""Clients as local processes: each runs its own event loop and a `Worker`; batches of requests go
to it over its own queue and batches of records come back over its own pipe. A thread on the driver
reads the pipes; a client's pipe that ends (EOF) is its death, noticed at once, and its records
already in the pipe are read first. One pipe per client, not a shared queue: a client killed in the
middle of a write then breaks only its own pipe, never a lock the other clients need."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from typing import Any

from oomkit.client.chat import ChatRequest
from oomkit.client.records import RequestRecord
from oomkit.scaleout.clients import (
    CLOCK_PROBES,
    Batch,
    ClientInfo,
    Dispatcher,
    Endpoint,
    PoolSpec,
    Worker,
    best_offset,
    run_loop,
)

WATCH_INTERVAL_S = 0.2
CLOCK_TIMEOUT_S = 60.0  # a spawned client imports httpx and oomkit's client first


class ProcessPool:
    def __init__(self, spec: PoolSpec, endpoint: Endpoint):
        self.spec, self.endpoint = spec, endpoint
        self._ctx = get_context("spawn")  # the driver holds threads (scraper, sampler): no fork
        self._processes: list[Any] = []
        self._inboxes: list[Any] = []
        self._pipes: dict[Connection, int] = {}
        self._dispatch = Dispatcher(spec.clients, self._send)
        self._stop = threading.Event()
        self._stopping = False
        self._clock_replies: queue.Queue[tuple[int, float]] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: threading.Thread | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for index in range(self.spec.clients):
            inbox = self._ctx.Queue()
            records, outbox = self._ctx.Pipe(duplex=False)
            process = self._ctx.Process(
                target=client_main,
                args=(index, inbox, outbox, self.endpoint),
                name=f"oomkit-client-{index}",
                daemon=True,
            )
            process.start()
            outbox.close()  # the client holds the only write end: its death is EOF here
            self._processes.append(process)
            self._inboxes.append(inbox)
            self._pipes[records] = index
            self._dispatch.slots[index].where = f"local:{process.pid}"
            self._dispatch.slots[index].via = "pipe"
        self._reader = threading.Thread(target=self._read, name="oomkit-client-records", daemon=True)
        self._reader.start()
        await asyncio.to_thread(self._sync_clocks)

    def _sync_clocks(self) -> None:
        for slot in self._dispatch.slots:
            probes = []
            for _ in range(CLOCK_PROBES):
                before = time.time()
                self._inboxes[slot.index].put(("clock", None))
                try:
                    _, client_now = self._clock_replies.get(timeout=CLOCK_TIMEOUT_S)
                except queue.Empty:
                    slot.lost = "no answer to the clock check within 60 s"
                    break
                probes.append((before, client_now, time.time()))
            if not slot.lost:
                slot.offset_s = best_offset(probes)

    async def chat(self, req: ChatRequest) -> RequestRecord:
        return await self._dispatch.chat(req)

    def clients(self) -> tuple[ClientInfo, ...]:
        return self._dispatch.clients()

    def process(self, index: int) -> Any:
        """The client's process (tests kill one mid-run)."""
        return self._processes[index]

    def _send(self, index: int, batch: Batch) -> None:
        self._inboxes[index].put(("chat", batch))

    def _read(self) -> None:
        open_pipes = set(self._pipes)
        while open_pipes and not self._stop.is_set():
            for pipe in wait(list(open_pipes), timeout=WATCH_INTERVAL_S):
                assert isinstance(pipe, Connection)
                index = self._pipes[pipe]
                try:
                    kind, payload = pipe.recv()
                except (EOFError, OSError):
                    open_pipes.discard(pipe)
                    self._ended(index)
                    continue
                if kind == "clock":
                    self._clock_replies.put((index, payload))
                else:
                    self._on_loop(self._dispatch.resolve, index, payload)

    def _ended(self, index: int) -> None:
        """The client's pipe ended: it exited (stopped, or died with requests still open)."""
        if self._stopping:
            return
        process = self._processes[index]
        process.join(timeout=WATCH_INTERVAL_S)
        self._on_loop(self._dispatch.fail, index, f"client process {process.pid} exited with {process.exitcode}")

    def _on_loop(self, fn: Any, *args: Any) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    async def stop(self) -> None:
        self._stopping = True
        for slot in self._dispatch.slots:
            if slot.lost is None:
                self._inboxes[slot.index].put(("stop", None))
        await asyncio.to_thread(self._join)
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _join(self) -> None:
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


def client_main(index: int, inbox: Any, outbox: Connection, endpoint: Endpoint) -> None:
    """The client process: serve batches from the inbox until told to stop."""
    run_loop(_serve(index, inbox, outbox, endpoint))


async def _serve(index: int, inbox: Any, outbox: Connection, endpoint: Endpoint) -> None:
    worker = Worker(index, endpoint)
    await worker.open()
    loop = asyncio.get_running_loop()
    sender = loop.create_task(_send_records(worker, outbox))
    while True:
        kind, payload = await loop.run_in_executor(None, inbox.get)
        if kind == "stop":
            break
        if kind == "clock":
            outbox.send(("clock", time.time()))
        else:
            worker.submit(payload)
    await worker.close()
    sender.cancel()
    if rest := worker.take_now():
        outbox.send(("records", rest))


async def _send_records(worker: Worker, outbox: Connection) -> None:
    """Whatever finished since the last message goes as one message."""
    while True:
        outbox.send(("records", await worker.take()))
