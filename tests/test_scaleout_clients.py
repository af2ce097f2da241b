"""Client pools: local client processes and Ray actors send to a real HTTP server (the fake OpenAI
streaming server in tests/_load_fake_server.py, which speaks vLLM's protocol); one client is killed
mid-run and its unfinished requests must come back as client losses, never lost or server errors."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.client.chat import ChatRequest, ClientOptions
from oomkit.scaleout.clients import CLIENT_LOST, Endpoint, PoolSpec, Router, measure_offset, open_pool
from oomkit.scaleout.ray_backend import RayTarget

HAS_RAY = importlib.util.find_spec("ray") is not None


def _requests(sessions: int, steps: int) -> list[ChatRequest]:
    return [
        ChatRequest(
            f"s{s}-{k}", {"messages": [{"role": "user", "content": f"hello {s} {k}"}], "max_tokens": 16}, "bench", s, k
        )
        for s in range(sessions)
        for k in range(steps)
    ]


async def _send_all(
    spec: PoolSpec, server: FakeOpenAI, reqs: list[ChatRequest], kill: int | None = None
) -> tuple[list, tuple]:
    endpoint = Endpoint(server.url, "tiny", None, ClientOptions(timeout_s=30, stall_timeout_s=10))
    async with open_pool(spec, endpoint) as pool:
        tasks = [asyncio.create_task(pool.chat(r)) for r in reqs]
        if kill is not None:
            await _all_streaming(server, len(reqs))
            _kill(pool, kill)
        records = await asyncio.gather(*tasks)
        return records, pool.clients()


async def _all_streaming(server: FakeOpenAI, count: int, timeout_s: float = 60.0) -> None:
    """Every request has reached the server: the kill lands mid-stream (a request takes ~2 s)
    however long the client processes took to start."""
    deadline = time.monotonic() + timeout_s
    while len(server.requests) < count:
        assert time.monotonic() < deadline, f"{len(server.requests)} of {count} requests reached the server"
        await asyncio.sleep(0.02)


def _kill(pool: object, index: int) -> None:
    actor = getattr(pool, "actor", None)
    if actor is not None:
        import ray

        ray.kill(actor(index), no_restart=True)
    else:
        os.kill(pool._clients[index].process.pid, signal.SIGKILL)  # type: ignore[attr-defined]


def test_router_keeps_a_session_on_one_client() -> None:
    router = Router(3)
    reqs = _requests(4, 3)
    assert {(r.session, router.pick(r)) for r in reqs} == {(s, s % 3) for s in range(4)}


def test_offset_is_the_midpoint() -> None:
    assert measure_offset(100.0, 105.5, 101.0) == pytest.approx(5.0)


def test_process_clients_send_everything_once() -> None:
    with FakeOpenAI(token_delay_s=0.001) as server:
        reqs = _requests(6, 2)
        before = time.time()
        records, clients = asyncio.run(_send_all(PoolSpec(2), server, reqs))
        assert [r.request_id for r in records] == [r.request_id for r in reqs]
        assert all(r.ok for r in records), [r.error for r in records if not r.ok]
        assert len(server.requests) == len(reqs)
        assert len(clients) == 2 and all(c.lost is None for c in clients)
        # same host: the measured offsets are tiny, and times are on the driver's clock
        assert all(abs(c.clock_offset_s) < 0.5 for c in clients)
        assert all(before - 1 <= r.started_unix_s <= time.time() for r in records)


def test_a_killed_client_process_loses_only_its_unfinished_requests() -> None:
    with FakeOpenAI(token_delay_s=0.05, tokens=40) as server:  # about 2 s a request: the kill lands mid-stream
        reqs = _requests(4, 1)
        records, clients = asyncio.run(_send_all(PoolSpec(2), server, reqs, kill=1))
    lost = [r for r in records if not r.ok]
    assert lost and all(r.error_kind == CLIENT_LOST for r in lost)
    assert {r.session for r in lost} <= {1, 3}  # sessions routed to client 1
    assert all(r.ok for r in records if r.session in (0, 2))
    assert clients[1].lost and clients[0].lost is None


@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (the `ray` extra)")
def test_ray_actor_clients_and_one_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with FakeOpenAI(token_delay_s=0.05, tokens=40) as server:
        reqs = _requests(4, 1)
        records, clients = asyncio.run(_send_all(PoolSpec(2, RayTarget("local", 2)), server, reqs, kill=1))
    assert [r.request_id for r in records] == [r.request_id for r in reqs]
    assert all(c.where.startswith("ray:") for c in clients)
    lost = [r for r in records if not r.ok]
    assert lost and all(r.error_kind == CLIENT_LOST for r in lost)
    assert all(r.ok for r in records if r.session in (0, 2))
