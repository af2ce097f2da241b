"""A fault-injecting HTTP/1.1 reverse proxy, for tests and benchmarks/faults.py: put it in front of
a real vLLM (or any OpenAI-compatible server) and it breaks chat streams on purpose, one fault per
request in the order given, while every other path (/health, /v1/models, /metrics, /tokenize)
passes through untouched. Stdlib asyncio on the client side, httpx to the upstream.

    with FaultProxy("http://127.0.0.1:8000", ["pass", "cut", "stall"]) as proxy:
        ...  # send chat requests to proxy.url; proxy.log says what each one got

Faults (a stream is forwarded event by event; `after` is the number of events passed first):
    pass        forwarded unchanged
    http_500    HTTP 500 with an OpenAI-style JSON error; upstream is not asked
    http_503    HTTP 503 with an HTML body, as a load balancer answers
    cut         `after` events, then the connection is dropped inside the chunked body
    malformed   `after` events, then a `data:` line that is not JSON, then the rest
    not_sse     `after` events, then a line that is no SSE field, then the rest
    no_done     every event but `data: [DONE]`; the body then ends cleanly
    truncated   `after` events, then the body ends cleanly: no finish_reason, no [DONE]
    stall       `after` events, then nothing more until the client hangs up
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

import httpx

FAULTS = ("pass", "http_500", "http_503", "cut", "malformed", "not_sse", "no_done", "truncated", "stall")
CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")
DONE = b"data: [DONE]"
ERROR_500 = json.dumps(
    {"error": {"message": "fault proxy: injected HTTP 500", "type": "InternalServerError", "param": None, "code": 500}}
).encode()
HTML_503 = b"<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>"
INJECTED_ANSWERS = {"http_500": (500, "application/json", ERROR_500), "http_503": (503, "text/html", HTML_503)}
INJECTED = {
    "malformed": b'data: {"id": "chatcmpl-cut", "choices": [{"delta": {"content": "x"\n\n',
    "not_sse": b"this line is not a server-sent event\n\n",
}
_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"content-length",
    b"host",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-connection",
}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FaultProxy:
    """Runs in its own thread and event loop. `log` gets one dict per chat request: n, fault,
    status (upstream's, or the injected one), events (forwarded), outcome."""

    def __init__(self, upstream: str, faults: Sequence[str] = ("pass",), after: int = 3):
        unknown = sorted(set(faults) - set(FAULTS))
        if unknown or not faults:
            raise ValueError(f"unknown faults {unknown}; choose from {FAULTS}")
        self.upstream = upstream.rstrip("/")
        self.after = after
        self._faults = itertools.cycle(faults)
        self.log: list[dict[str, Any]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, int]:
        """Chat requests received, by fault."""
        out: dict[str, int] = {}
        for entry in list(self.log):
            out[entry["fault"]] = out.get(entry["fault"], 0) + 1
        return out

    def start(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        self._http = httpx.AsyncClient(
            base_url=self.upstream, timeout=httpx.Timeout(600.0, connect=10.0), trust_env=False
        )
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await self._http.aclose()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, httpx.HTTPError):
            pass
        finally:
            writer.transport.abort()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection must close."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        method, path, _ = lines[0].decode("latin1").split(" ", 2)
        headers = [(k.strip(), v.strip()) for k, _, v in (ln.partition(b":") for ln in lines[1:] if ln)]
        length = next((int(v) for k, v in headers if k.lower() == b"content-length"), 0)
        body = await reader.readexactly(length)
        forward = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]
        if method == "POST" and path.split("?")[0] in CHAT_PATHS:
            return await self._chat(path, forward, body, reader, writer)
        resp = await self._http.request(method, path, headers=forward, content=body)
        await self._respond(writer, resp.status_code, resp.headers.get("content-type", "text/plain"), resp.content)
        return True

    async def _respond(self, writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes) -> None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        writer.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status, reason.encode(), ctype.encode("latin1"), len(body), body)
        )
        await writer.drain()

    async def _chat(
        self,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        fault = next(self._faults)
        entry: dict[str, Any] = {"n": len(self.log), "fault": fault, "status": None, "events": 0, "outcome": None}
        self.log.append(entry)
        if fault in INJECTED_ANSWERS:
            status, ctype, text = INJECTED_ANSWERS[fault]
            entry.update(status=status, outcome="answered")
            await self._respond(writer, status, ctype, text)
            return True
        req = self._http.build_request("POST", path, headers=headers, content=body)
        resp = await self._http.send(req, stream=True)
        try:
            entry["status"] = resp.status_code
            if resp.status_code != 200 or "event-stream" not in resp.headers.get("content-type", ""):
                ctype = resp.headers.get("content-type", "")
                await self._respond(writer, resp.status_code, ctype, await resp.aread())
                entry["outcome"] = "passed"
                return True
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n"
                % resp.headers["content-type"].encode("latin1")
            )
            return await self._stream(fault, entry, resp, reader, writer)
        except ConnectionError:
            entry["outcome"] = f"{entry['outcome'] or 'forwarding'}, client hung up"
            raise
        finally:
            await resp.aclose()  # upstream sees the disconnect and aborts the request

    async def _stream(
        self,
        fault: str,
        entry: dict[str, Any],
        resp: httpx.Response,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        buf = b""
        async for piece in resp.aiter_raw():
            buf += piece
            *events, buf = buf.split(b"\n\n")
            for event in events:
                if entry["events"] == self.after and fault in ("cut", "truncated", "stall"):
                    return await self._break_off(fault, entry, reader, writer)
                if entry["events"] == self.after and fault in INJECTED:
                    writer.write(_chunk(INJECTED[fault]))
                    entry["outcome"] = "injected"
                if fault == "no_done" and event.strip() == DONE:
                    continue
                writer.write(_chunk(event + b"\n\n"))
                entry["events"] += 1
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        entry["outcome"] = "injected, then complete" if entry["outcome"] else "complete"
        return True

    async def _break_off(
        self, fault: str, entry: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        await writer.drain()
        if fault == "truncated":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            entry["outcome"] = "truncated"
            return True
        if fault == "stall":
            entry["outcome"] = "stalled"
            await reader.read(1)  # b"" once the client gives up and closes
            entry["outcome"] = "stalled, client hung up"
            return False
        entry["outcome"] = "cut"
        return False
