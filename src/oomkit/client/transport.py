"""A small HTTP/1.1 transport for httpx, used for plain `http://` targets.

Why: with httpx's default transport (httpcore + h11, pure Python) every SSE event costs one
chunked-encoding event and a walk over the connection pool; at 256 concurrent streams that made
our client 2.5-5x slower per token than `vllm bench serve` (aiohttp), and a load generator that is
the bottleneck measures itself (benchmarks/client_overhead.py). This transport reads the socket in
large pieces, decodes all complete chunks of a piece in one loop, and keeps idle connections in a
LIFO list. It speaks only what OpenAI-compatible servers send: HTTP/1.1, Content-Length, chunked,
or read-until-close bodies, no upgrades. `https://` stays on httpx's own transport.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

READ_SIZE = 256 * 1024
_NO_BODY_STATUS = {204, 304}


class _StaleConnection(Exception):
    """A reused connection failed before any byte of the response came back: the server closed it
    while idle and did not process the request, so the request is sent again on another one."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.used = False

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


async def _within(timeout_s: float | None, awaitable, error: type[httpx.TimeoutException], request):
    if timeout_s is None:
        return await awaitable
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError as err:
        raise error(f"no answer within {timeout_s:g} s", request=request) from err


@dataclass(frozen=True)
class _Lease:
    """A connection taken from the pool, and where to give it back."""

    transport: Http11Transport
    key: tuple[str, int]
    conn: _Connection


@dataclass(frozen=True)
class _Framing:
    """How the response body ends: `length` bytes, chunked, or at connection close."""

    mode: str  # length | chunked | close
    length: int
    keep_alive: bool


class _Body(httpx.AsyncByteStream):
    """The response body; gives the connection back to the pool when read to the end."""

    def __init__(self, lease: _Lease, request: httpx.Request, framing: _Framing, read_timeout_s: float | None):
        self._lease, self._conn, self._request = lease, lease.conn, request
        self._mode, self._length, self._keep_alive = framing.mode, framing.length, framing.keep_alive
        # Bytes the head read already pulled past the blank line stay in the StreamReader.
        self._rest = b""
        self._timeout_s = read_timeout_s
        self._complete = False

    async def _read(self) -> bytes:
        try:
            return await _within(self._timeout_s, self._conn.reader.read(READ_SIZE), httpx.ReadTimeout, self._request)
        except (ConnectionError, OSError) as err:
            raise httpx.ReadError(str(err) or type(err).__name__, request=self._request) from err

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._mode == "chunked":
            async for piece in self._chunked():
                yield piece
        elif self._mode == "length":
            async for piece in self._sized():
                yield piece
        else:
            async for piece in self._until_close():
                yield piece

    async def _sized(self) -> AsyncIterator[bytes]:
        left = self._length
        data = self._rest
        while True:
            if data:
                piece, data = data[:left], b""
                left -= len(piece)
                yield piece
            if left <= 0:
                self._complete = True
                return
            data = await self._read()
            if not data:
                raise httpx.RemoteProtocolError("connection closed before the body ended", request=self._request)

    async def _until_close(self) -> AsyncIterator[bytes]:
        self._keep_alive = False
        if self._rest:
            yield self._rest
        while data := await self._read():
            yield data
        self._complete = True

    async def _chunked(self) -> AsyncIterator[bytes]:
        buf = self._rest
        while True:
            out, buf, finished = _decode_chunks(buf, self._request)
            if out:
                yield out
            if finished:
                self._complete = True
                return
            data = await self._read()
            if not data:
                raise httpx.RemoteProtocolError(
                    "connection closed in the middle of a chunked body", request=self._request
                )
            buf = buf + data if buf else data

    async def aclose(self) -> None:
        if self._complete and self._keep_alive:
            self._lease.transport._release(self._lease.key, self._conn)
        else:
            self._conn.close()


def _decode_chunks(buf: bytes, request: httpx.Request) -> tuple[bytes, bytes, bool]:
    """Decode every complete chunk at the start of `buf`: (payload, unread rest, last chunk seen)."""
    parts: list[bytes] = []
    pos = 0
    end_of_buf = len(buf)
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            break
        try:
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad chunk size line {buf[pos:eol][:40]!r}", request=request) from None
        if size == 0:
            # The last chunk; ignore trailers, wait for the empty line that ends them.
            done = buf.find(b"\r\n\r\n", eol)
            if done < 0:
                break
            return b"".join(parts), buf[done + 4 :], True
        start = eol + 2
        stop = start + size
        if stop + 2 > end_of_buf:
            break
        parts.append(buf[start:stop])
        pos = stop + 2
    return b"".join(parts), buf[pos:], False


def _parse_head(head: bytes, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x response: {lines[0][:60]!r}", request=request)
    try:
        status = int(status_line[1])
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status line {lines[0][:60]!r}", request=request) from None
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
    return status, headers


class Http11Transport(httpx.AsyncBaseTransport):
    """Plain-HTTP/1.1 keep-alive transport (see the module docstring for why it exists)."""

    def __init__(self, max_idle_per_host: int = 1024):
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._max_idle = max_idle_per_host

    def _release(self, key: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self._max_idle:
            idle.append(conn)
        else:
            conn.close()

    async def _connect(self, request: httpx.Request, key: tuple[str, int], timeout_s: float | None) -> _Connection:
        try:
            reader, writer = await _within(
                timeout_s, asyncio.open_connection(*key, limit=READ_SIZE), httpx.ConnectTimeout, request
            )
        except OSError as err:
            raise httpx.ConnectError(str(err) or type(err).__name__, request=request) from err
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"Http11Transport serves http:// only, not {request.url.scheme}", request=request
            )
        timeouts = request.extensions.get("timeout", {})
        key = (request.url.host, request.url.port or 80)
        body = await request.aread()
        payload = _request_bytes(request, body)
        idle = self._idle.get(key)
        while idle:
            # A reused connection may have been closed by the server while idle: retry on a new
            # one, but only when nothing came back (the request was not processed).
            conn = idle.pop()
            with contextlib.suppress(_StaleConnection):
                return await self._exchange(request, key, conn, payload, timeouts)
        conn = await self._connect(request, key, timeouts.get("connect"))
        return await self._exchange(request, key, conn, payload, timeouts)

    async def _exchange(
        self,
        request: httpx.Request,
        key: tuple[str, int],
        conn: _Connection,
        payload: bytes,
        timeouts: dict[str, float | None],
    ) -> httpx.Response:
        reused = conn.used
        conn.used = True
        try:
            conn.writer.write(payload)
            head = await _within(timeouts.get("read"), conn.reader.readuntil(b"\r\n\r\n"), httpx.ReadTimeout, request)
        except asyncio.IncompleteReadError as err:
            conn.close()
            if reused and not err.partial:
                raise _StaleConnection from err
            raise httpx.RemoteProtocolError("server closed the connection without a response", request=request) from err
        except asyncio.LimitOverrunError as err:
            conn.close()
            raise httpx.RemoteProtocolError("response headers too large", request=request) from err
        except (ConnectionError, OSError) as err:
            conn.close()
            if reused:
                raise _StaleConnection from err
            raise httpx.ReadError(str(err) or type(err).__name__, request=request) from err
        except BaseException:
            conn.close()
            raise
        status, headers = _parse_head(head[:-4], request)
        http10 = head.startswith(b"HTTP/1.0")
        version = b"HTTP/1.0" if http10 else b"HTTP/1.1"
        body = _Body(_Lease(self, key, conn), request, _framing(request, status, headers, http10), timeouts.get("read"))
        return httpx.Response(
            status, headers=headers, extensions={"http_version": version}, stream=body, request=request
        )

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


def _framing(request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]], http10: bool) -> _Framing:
    lower = {k.lower(): v.lower() for k, v in headers}
    connection = lower.get(b"connection", b"")
    keep_alive = connection == b"keep-alive" if http10 else connection != b"close"
    if request.method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
        return _Framing("length", 0, keep_alive)
    if b"chunked" in lower.get(b"transfer-encoding", b""):
        return _Framing("chunked", 0, keep_alive)
    if b"content-length" in lower:
        return _Framing("length", int(lower[b"content-length"]), keep_alive)
    return _Framing("close", 0, keep_alive)


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), target)]
    has_length = False
    for name, value in request.headers.raw:
        lname = name.lower()
        if lname == b"content-length":
            has_length = True
        if lname == b"transfer-encoding":
            continue  # we always send the body whole, with a Content-Length
        lines.append(name + b": " + value)
    if body and not has_length:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
