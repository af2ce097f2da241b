"""The streaming client against a real local HTTP server (tests/_load_fake_server.py): timings,
usage, tool-call validation, and every error class the brief names."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from _load_fake_server import FakeOpenAI

from oomkit.client import ChatClient, ChatRequest, ClientOptions, check_tool_calls, normalise_url, probe
from oomkit.client.records import ToolCall
from oomkit.client.sse import MalformedStream, SseDecoder
from oomkit.client.transport import Http11Transport, _decode_chunks
from oomkit.errors import InputError, RunFailed

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI(token_delay_s=0.001) as server:
        yield server


@pytest.fixture(autouse=True)
def reset(fake):
    fake.mode, fake.dead = "ok", False
    yield


def chat(url: str, body: dict, **opts) -> RequestRecord:  # noqa: F821
    async def go():
        async with ChatClient(url, "fake-model", options=ClientOptions(**opts)) as c:
            return await c.chat(ChatRequest("r1", body, label="t"))

    return asyncio.run(go())


BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def test_stream_records_timing_usage_and_text(fake):
    rec = chat(fake.url, BODY)
    assert rec.ok and rec.error_kind is None and rec.http_status == 200
    assert rec.output_tokens == 8 and rec.prompt_tokens and rec.cached_tokens == 16
    assert rec.content.split() == [f"t{i}" for i in range(8)]
    assert rec.finish_reason == "length" and rec.chunks == 8 and len(rec.itl_ms) == 7
    assert 0 < rec.ttft_ms <= rec.latency_ms
    sent = fake.requests[-1]
    assert (
        sent["stream"] is True and sent["stream_options"] == {"include_usage": True} and sent["model"] == "fake-model"
    )


def test_ttft_is_measured_to_the_millisecond(fake):
    fake.token_delay_s = 0.05  # the first token leaves at once, the next after 50 ms
    try:
        rec = chat(fake.url, {**BODY, "max_tokens": 3})
    finally:
        fake.token_delay_s = 0.001
    assert rec.ok and rec.ttft_ms < 40
    assert all(45 <= gap <= 90 for gap in rec.itl_ms), rec.itl_ms


@pytest.mark.parametrize(
    "mode,kind",
    [
        ("malformed", "malformed_stream"),
        ("badjson", "malformed_stream"),
        ("html", "not_openai"),
        ("not_found", "not_openai"),
        ("http500_engine", "engine_dead"),
        ("inband_engine", "engine_dead"),
        ("no_usage", None),
    ],
)
def test_error_classes(fake, mode, kind):
    fake.mode = mode
    rec = chat(fake.url, BODY)
    assert rec.error_kind == kind and rec.ok is (kind is None)
    if mode == "inband_engine":
        assert rec.chunks == 3 and rec.content  # what streamed before the death is kept
    if mode == "no_usage":
        assert rec.output_tokens is None  # unknown, not zero


def test_context_length_is_a_400_class(fake):
    rec = chat(fake.url, {**BODY, "max_tokens": 10_000})
    assert rec.error_kind == "context_length" and rec.http_status == 400
    assert "maximum context length is 4096" in rec.error


def test_a_stalled_stream_times_out(fake):
    fake.mode = "stall"
    rec = chat(fake.url, BODY, stall_timeout_s=0.5)
    assert rec.error_kind == "timeout" and not rec.ok
    rec = chat(fake.url, BODY, timeout_s=0.5, stall_timeout_s=30)
    assert rec.error_kind == "timeout" and "0.5 s" in rec.error


def test_refused_and_retries_are_counted():
    rec = chat("http://127.0.0.1:9", BODY, max_retries=2)
    assert rec.error_kind == "refused" and rec.retries == 2


def test_tool_calls_are_accumulated_and_validated(fake):
    named = {**BODY, "tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "add"}}}
    rec = chat(fake.url, named)
    assert rec.ok and rec.tool_calls[0].name == "add" and json.loads(rec.tool_calls[0].arguments) == {"a": 1, "b": 1}
    assert rec.tool_check.valid and rec.finish_reason == "stop"
    fake.mode = "badtool"
    rec = chat(fake.url, named, tool_retries=2)
    assert rec.ok and not rec.tool_check.valid and "not JSON" in rec.tool_check.problems[0]
    assert rec.retries == 2 and rec.attempts_invalid_tools == 3


def test_api_key_is_sent():
    with FakeOpenAI(api_key="sk-test-0123456789abcdef") as server:
        assert chat(server.url, BODY).error_kind == "bad_request"  # 401 without it

        async def go():
            async with ChatClient(server.url, "fake-model", api_key="sk-test-0123456789abcdef") as c:
                return await c.chat(ChatRequest("r", BODY))

        assert asyncio.run(go()).ok
        with pytest.raises(InputError, match="HTTP 401") as err:
            probe(server.url)
        assert "--api-key" in err.value.hint
        assert probe(server.url + "/v1", api_key="sk-test-0123456789abcdef").model == "fake-model"


@pytest.mark.parametrize(
    "calls,choice,finish,content,problem",
    [
        ((), "required", "stop", "", "no tool call returned"),
        ((ToolCall("1", "add", '{"a": 1}'),), "required", "tool_calls", "", "'b' is a required property"),
        ((ToolCall("1", "add", '{"a": 1, "b": "x"}'),), "auto", "tool_calls", "", "is not of type 'integer'"),
        ((ToolCall("1", "nope", "{}"),), "auto", "tool_calls", "", "unknown tool 'nope'"),
        ((), "required", "length", '<tool_call>{"name": "add"', "markup '<tool_call>' left in content"),
        (
            (ToolCall("1", "add", '{"a":1,"b":2}'), ToolCall("1", "add", '{"a":1,"b":2}')),
            "auto",
            "tool_calls",
            "",
            "duplicate tool call ids",
        ),
        (
            (ToolCall("1", "add", '{"a":1,"b":2}'),),
            {"type": "function", "function": {"name": "sub"}},
            "stop",
            "",
            "but 'sub' was named",
        ),
    ],
)
def test_tool_check_problems(calls, choice, finish, content, problem):
    check = check_tool_calls(calls, [ADD], choice, finish, content)
    assert not check.valid and any(problem in p for p in check.problems), check.problems


def test_tool_check_accepts_a_valid_call_and_ignores_requests_without_tools():
    assert check_tool_calls((ToolCall("1", "add", '{"a":1,"b":2}'),), [ADD], "auto", "tool_calls", "").valid
    assert check_tool_calls((), [ADD], "auto", "stop", "just text").valid
    assert check_tool_calls((), None, "auto", "stop", "") is None


def test_sse_decoder_follows_the_spec():
    d = SseDecoder()
    assert d.feed(b"data: a\n") == []
    assert d.feed(b"data: b\n\n: comment\n\nevent: x\r\ndata:c\r\n\r\n") == ["a\nb", "c"]
    assert d.feed("data: é".encode()[:-1]) == [] and d.feed("é\n\n".encode()[1:]) == ["é"]  # split UTF-8
    assert d.feed(b"data: tail") == [] and d.close() == ["tail"]
    with pytest.raises(MalformedStream):
        SseDecoder().feed(b"<html>\n\n")


def test_chunked_decoding_keeps_partial_chunks():
    req = httpx.Request("GET", "http://x/")
    out, rest, done = _decode_chunks(b"3\r\nabc\r\n4\r\nde", req)
    assert (out, rest, done) == (b"abc", b"4\r\nde", False)
    out, rest, done = _decode_chunks(rest + b"fg\r\n0\r\n\r\nNEXT", req)
    assert (out, rest, done) == (b"defg", b"NEXT", True)
    with pytest.raises(httpx.RemoteProtocolError):
        _decode_chunks(b"zz\r\n", req)


def test_transport_keeps_connections_alive(fake):
    async def go():
        async with httpx.AsyncClient(mounts={"http://": Http11Transport()}) as c:
            before = fake.connections
            replies = [await c.get(fake.url + "/v1/models") for _ in range(3)]
            streamed = [
                (await c.post(fake.url + "/v1/chat/completions", json={**BODY, "stream": True})).status_code
                for _ in range(2)
            ]
            return [r.json()["data"][0]["id"] for r in replies], streamed, fake.connections - before

    ids, streamed, opened = asyncio.run(go())
    assert ids == ["fake-model"] * 3 and streamed == [200, 200] and opened == 1


def test_probe_explains_what_is_wrong(fake):
    info = probe(fake.url)
    assert info.model == "fake-model" and info.max_model_len == 4096
    with pytest.raises(InputError, match="not served"):
        probe(fake.url, model="other")
    with pytest.raises(RunFailed, match="nothing answers"):
        probe("http://127.0.0.1:9")
    with pytest.raises(InputError, match="not an http"):
        normalise_url("127.0.0.1:8000")


def test_probe_rejects_a_server_that_is_not_openai():
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>a web page</html>")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(InputError, match="not an OpenAI-compatible server"):
            probe(f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()


def test_a_keep_alive_connection_closed_while_idle_is_replaced():
    """A server that drops every connection after one response (without saying so): the second
    request finds its pooled connection dead before any byte and is sent again on a new one."""

    async def go():
        served = []
        closed = asyncio.Event()

        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            served.append(1)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            closed.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(mounts={"http://": Http11Transport()}) as c:
            first = await c.get(f"http://127.0.0.1:{port}/a")
            await asyncio.wait_for(closed.wait(), 10)  # the pooled connection is dead before the next request
            second = await c.get(f"http://127.0.0.1:{port}/b")
        server.close()
        return first.status_code, second.status_code, len(served)

    assert asyncio.run(go()) == (200, 200, 2)


def test_http10_and_read_until_close_bodies():
    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(mounts={"http://": Http11Transport()}) as c:
            resp = await c.get(f"http://127.0.0.1:{port}/")
        server.close()
        return resp.status_code, resp.text, resp.http_version

    assert asyncio.run(go()) == (200, "all of it", "HTTP/1.0")
