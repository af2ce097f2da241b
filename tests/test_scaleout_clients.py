"""Client pools: local client processes and Ray actors send to a real HTTP server (the fake OpenAI
streaming server in tests/_load_fake_server.py, which speaks vLLM's protocol); one client is killed
mid-run and its unfinished requests must come back as client losses, never lost or server errors,
while the records it had finished before stay. The driver's end (`Dispatcher`: batches out, records
in, a death) is also checked on its own, with a transport that only keeps what it is given."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import struct
import time

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.client.chat import ChatRequest, ClientOptions
from oomkit.client.records import RequestRecord
from oomkit.scaleout.clients import (
    CLIENT_LOST,
    Batch,
    Dispatcher,
    Endpoint,
    PoolSpec,
    Router,
    measure_offset,
    open_pool,
)
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
    spec: PoolSpec, server: FakeOpenAI, reqs: list[ChatRequest], kill: int | None = None, after: int = 0
) -> tuple[list, tuple]:
    """Send every request at once; with `kill`, that client is killed once every request reached
    the server and the first `after` requests have their records back on the driver."""
    endpoint = Endpoint(server.url, "tiny", None, ClientOptions(timeout_s=30, stall_timeout_s=10))
    async with open_pool(spec, endpoint) as pool:
        tasks = [asyncio.create_task(pool.chat(r)) for r in reqs]
        if kill is not None:
            await _all_streaming(server, len(reqs))
            await asyncio.wait_for(asyncio.gather(*tasks[:after]), timeout=30)
            _kill(pool, kill)
        records = await asyncio.gather(*tasks)
        return records, pool.clients()


def _short_then_long(sessions: int) -> list[ChatRequest]:
    """Per session, a 2-token answer and a 150-token one (3 s at 20 ms a token); short ones first."""
    return [
        ChatRequest(f"s{s}-{k}", {"messages": [{"role": "user", "content": f"hi {s}"}], "max_tokens": n}, "b", s, k)
        for k, n in enumerate((2, 150))
        for s in range(sessions)
    ]


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
        os.kill(pool.process(index).pid, signal.SIGKILL)  # type: ignore[attr-defined]


def _answer(req: ChatRequest, started_unix_s: float = 1000.0) -> RequestRecord:
    return RequestRecord(req.request_id, req.label, req.session, req.step, started_unix_s, True)


def test_dispatcher_batches_a_turn_and_a_death_loses_only_unanswered_requests() -> None:
    sent: list[tuple[int, Batch]] = []
    dispatch = Dispatcher(2, lambda index, batch: sent.append((index, batch)))
    dispatch.slots[0].offset_s = 2.5
    reqs = _requests(4, 2)  # sessions 0 and 2 on client 0, 1 and 3 on client 1

    async def scenario() -> tuple[list[RequestRecord], RequestRecord]:
        tasks = [asyncio.create_task(dispatch.chat(r)) for r in reqs]
        await asyncio.sleep(0.01)
        # One message per client for everything asked in the same turn of the loop.
        assert sorted((i, len(b)) for i, b in sent) == [(0, 4), (1, 4)]
        batches = dict(sent)
        dispatch.resolve(0, [(token, _answer(req)) for token, req in batches[0]])
        dispatch.resolve(1, [(token, _answer(req)) for token, req in batches[1][:1]])  # one came back
        dispatch.fail(1, "client 1 died")
        later = await dispatch.chat(reqs[2])  # session 1: client 1
        return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)), later

    records, later = asyncio.run(asyncio.wait_for(scenario(), timeout=20))
    assert [r.request_id for r in records] == [r.request_id for r in reqs]
    on_0 = [r for r in records if r.session in (0, 2)]
    assert all(r.ok and r.started_unix_s == pytest.approx(997.5) for r in on_0)  # on the driver's clock
    on_1 = [r for r in records if r.session in (1, 3)]
    assert sum(r.ok for r in on_1) == 1
    assert [r.error_kind for r in on_1 if not r.ok] == [CLIENT_LOST] * 3
    assert later.error_kind == CLIENT_LOST and "died earlier" in (later.error or "")
    assert [c.lost for c in dispatch.clients()] == [None, "client 1 died"]
    assert len(sent) == 2  # nothing is sent to a dead client


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
    assert [c.records_via for c in clients] == ["socket", "socket"]  # the driver is reachable here
    lost = [r for r in records if not r.ok]
    assert lost and all(r.error_kind == CLIENT_LOST for r in lost)
    assert all(r.ok for r in records if r.session in (0, 2))


_NO_RAY = pytest.mark.skipif(not HAS_RAY, reason="no Ray")


@pytest.mark.parametrize(
    "kind", ["processes", pytest.param("ray", marks=_NO_RAY), pytest.param("ray calls", marks=_NO_RAY)]
)
def test_a_killed_client_keeps_the_records_it_had_sent(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray actors on their direct link, and on Ray calls (the fallback where an actor cannot reach
    the driver, forced here with OOMKIT_RAY_LINK=0)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("OOMKIT_RAY_LINK", "0" if kind == "ray calls" else "1")
    spec = PoolSpec(2, RayTarget("local", 2) if kind.startswith("ray") else None)
    with FakeOpenAI(token_delay_s=0.02) as server:
        reqs = _short_then_long(4)
        records, clients = asyncio.run(_send_all(spec, server, reqs, kill=1, after=4))
    by_id = {r.request_id: r for r in records}
    assert all(by_id[f"s{s}-0"].ok for s in range(4))  # answered before the kill: kept
    assert all(by_id[f"s{s}-1"].ok for s in (0, 2))  # on the client that lived
    assert [by_id[f"s{s}-1"].error_kind for s in (1, 3)] == [CLIENT_LOST, CLIENT_LOST]
    assert clients[1].lost and clients[0].lost is None
    assert clients[0].records_via == {"processes": "pipe", "ray": "socket", "ray calls": "ray calls"}[kind]


def test_the_link_reads_nothing_from_a_peer_without_the_token() -> None:
    """The driver's link unpickles only what a client that sent the run's token sends: a peer with
    a wrong token is cut off before its frames are read, and a good one's frames arrive in order."""
    from oomkit.scaleout.link import LinkAddress, LinkServer, connect, frame

    got: list[tuple[int, object]] = []
    ended: list[int] = []

    async def scenario() -> None:
        server = LinkServer(lambda index, message: got.append((index, message)), ended.append)
        address = await server.start("127.0.0.1")
        bad = await connect(LinkAddress(address.host, address.port, b"x" * 16), 0)
        assert bad is not None
        bad[1].write(frame(["from a stranger"]))
        await bad[1].drain()
        assert await bad[0].read() == b""  # the driver closed it
        good = await connect(address, 1)
        assert good is not None
        await asyncio.wait_for(server.expect(1), 5)
        for n in range(3):
            good[1].write(frame([n]))
        await good[1].drain()
        good[1].close()
        await asyncio.wait_for(server.ended(1), 5)
        assert not server.expect(0).done()
        # A frame that does not unpickle ends that client's link (its requests are lost), no hang.
        broken = await connect(address, 2)
        assert broken is not None
        broken[1].write(struct.pack("!I", 3) + b"\x80\x05X")
        await broken[1].drain()
        await asyncio.wait_for(server.ended(2), 5)
        await server.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert got == [(1, [0]), (1, [1]), (1, [2])]
    assert ended == [1, 2]
