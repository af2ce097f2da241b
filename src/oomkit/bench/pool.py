"""A bench's client pool (`--clients N [--ray [ADDRESS]]`): N client processes or Ray actors stream
the requests while this process keeps the one run folder, scraper and request log. What the pool
did — each client's host, clock offset and death — goes into the run folder's manifest, and a run
that lost a client is marked partial with the reason."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from oomkit.client.chat import ClientOptions
from oomkit.loadrun.target import Target
from oomkit.rundir import RunDir
from oomkit.scaleout.clients import ClientPool, Endpoint, PoolSpec, open_pool
from oomkit.scaleout.ray_backend import RayTarget

if TYPE_CHECKING:
    from oomkit.bench.run import BenchOptions


@contextlib.asynccontextmanager
async def client_pool(opts: BenchOptions, target: Target, client: ClientOptions) -> AsyncIterator[ClientPool | None]:
    """The pool the options ask for, or None: one client in this process."""
    if opts.clients <= 1 and opts.ray is None:
        yield None
        return
    ray = None if opts.ray is None else RayTarget(opts.ray or None)
    endpoint = Endpoint(target.base_url, target.model, target.api_key, client)
    async with open_pool(PoolSpec(opts.clients, ray), endpoint) as pool:
        yield pool


def record_clients(run: RunDir, pool: ClientPool | None) -> tuple[str, ...]:
    """Writes the clients into the manifest; returns the notes for the result (a lost client)."""
    if pool is None:
        return ()
    clients = pool.clients()
    lost = [c for c in clients if c.lost]
    partial = f"{len(lost)} of {len(clients)} clients died: " + "; ".join(c.lost or "" for c in lost) if lost else None
    run.update(
        clients=[
            {
                "index": c.index,
                "where": c.where,
                "records_via": c.records_via,
                "clock_offset_s": c.clock_offset_s,
                "lost": c.lost,
            }
            for c in clients
        ],
        partial=partial,
    )
    return (
        (
            f"partial run: {partial}; their unfinished requests are counted as client losses, "
            "and --resume sends the sessions they cut",
        )
        if partial
        else ()
    )
