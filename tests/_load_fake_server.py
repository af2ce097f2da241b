"""A real HTTP server (asyncio, in a thread) that speaks the OpenAI chat streaming API the way
vLLM does (cpu-testbed.md §8: role chunk, content chunks, finish chunk, usage chunk, [DONE]), with
a /metrics page whose counters follow the traffic. Faults are chosen with `mode`. It implements
the protocol; nothing of oomkit is faked."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import Any

VLLM_DEAD = {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}
MODES = (
    "ok",
    "malformed",
    "badjson",
    "stall",
    "http500_engine",
    "inband_engine",
    "html",
    "not_found",
    "badtool",
    "think_in_content",
    "no_usage",
)


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _prompt_tokens(body: dict[str, Any]) -> int:
    text = "".join(
        str(m.get("content") or "") + json.dumps(m.get("tool_calls") or "") for m in body.get("messages", [])
    )
    return _tokens(text + json.dumps(body.get("tools") or ""))


def _args_for(tool: dict[str, Any], valid: bool) -> str:
    if not valid:
        return '{"unexpected": true'  # unparseable JSON
    out: dict[str, Any] = {}
    for key, schema in tool["function"]["parameters"].get("properties", {}).items():
        if "enum" in schema:
            out[key] = schema["enum"][0]
        else:
            out[key] = {"integer": 1, "number": 1.5, "boolean": True}.get(schema.get("type"), "x")
    return json.dumps(out)


class FakeOpenAI:
    def __init__(
        self,
        *,
        tokens: int | None = None,
        token_delay_s: float = 0.0005,
        kv_capacity: int = 1000,
        max_model_len: int = 4096,
        report_max_model_len: bool = True,
        legacy_metrics: bool = False,
        reasoning: bool = False,
        metrics: bool = True,
        api_key: str | None = None,
        port: int = 0,
    ):
        self.tokens, self.token_delay_s, self.kv_capacity = tokens, token_delay_s, kv_capacity
        self.max_model_len, self.legacy_metrics, self.reasoning = max_model_len, legacy_metrics, reasoning
        self.report_max_model_len = report_max_model_len  # False: like a non-vLLM server, /v1/models omits it
        self.metrics_enabled, self.api_key = metrics, api_key
        self.mode = "ok"
        self.die_after_tokens: int | None = None
        self.requests: list[dict[str, Any]] = []
        self.counters = {"prompt": 0, "generation": 0, "preemptions": 0, "queries": 0, "hits": 0}
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.active = 0
        self.max_active = 0
        self.connections = 0
        self.dead = False
        self._seen_prefixes: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = port  # 0: a free one (a fake launched by `oomkit launch` takes the one it is given)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        self._thread.start()
        self._ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._conn, "127.0.0.1", self.port, backlog=1024)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def kill(self) -> None:
        """Like SIGKILL of the server: stop listening and drop every connection."""

        def _kill() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            done.set()

        done = threading.Event()
        if threading.current_thread() is self._thread:
            _kill()  # from a handler: the loop is this thread, waiting for it would block it
        else:
            self._loop.call_soon_threadsafe(_kill)
            done.wait(5)  # the caller goes on once nothing listens and every stream is cut

    def stop(self) -> None:
        self.kill()

        async def _cancel() -> None:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(_cancel(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP ------------------------------------------------------------------------------
    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._dispatch(method, path, headers, body, writer)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
        )
        await writer.drain()

    async def _json(self, writer: asyncio.StreamWriter, obj: Any, status: str = "200 OK") -> None:
        await self._send(writer, status, "application/json", json.dumps(obj).encode())

    async def _dispatch(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}" and path != "/health":
            return await self._json(writer, {"error": {"message": "unauthorized"}}, "401 Unauthorized")
        if path == "/health":
            return await self._send(writer, "503 Service Unavailable" if self.dead else "200 OK", "text/plain", b"")
        if path == "/v1/models":
            card = {"id": "fake-model", "object": "model", "root": "fake-model"}
            if self.report_max_model_len:
                card["max_model_len"] = self.max_model_len
            return await self._json(writer, {"object": "list", "data": [card]})
        if path == "/metrics":
            if not self.metrics_enabled:
                return await self._send(writer, "404 Not Found", "text/plain", b"not found")
            return await self._send(writer, "200 OK", "text/plain; version=0.0.4", self.metrics_text().encode())
        if path == "/tokenize":
            body = json.loads(raw)
            n = _prompt_tokens(body) if "messages" in body else _tokens(body["prompt"])
            return await self._json(writer, {"count": n, "max_model_len": self.max_model_len, "tokens": list(range(n))})
        if path == "/v1/chat/completions":
            return await self._chat(json.loads(raw), writer)
        await self._json(writer, {"detail": "Not Found"}, "404 Not Found")

    # -- chat ------------------------------------------------------------------------------
    async def _chunked(self, writer: asyncio.StreamWriter, data: str) -> None:
        b = data.encode()
        writer.write(b"%x\r\n%s\r\n" % (len(b), b))

    def _chunk(self, delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        obj = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "fake-model",
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(obj)}\n\n"

    async def _chat(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        self.requests.append(body)
        mode = self.mode
        if self.dead:
            return await self._json(writer, {"error": VLLM_DEAD}, "500 Internal Server Error")
        if mode == "not_found":
            return await self._json(writer, {"detail": "Not Found"}, "404 Not Found")
        if mode == "html":
            return await self._send(writer, "200 OK", "text/html", b"<html>hello</html>")
        if mode == "http500_engine":
            self.dead = True
            return await self._json(writer, {"error": VLLM_DEAD}, "500 Internal Server Error")
        prompt = _prompt_tokens(body)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if prompt + max_tokens > self.max_model_len:
            msg = (
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion)."
            )
            return await self._json(
                writer, {"error": {"message": msg, "type": "BadRequestError", "code": 400}}, "400 Bad Request"
            )
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        if self.active > self.kv_capacity:
            self.counters["preemptions"] += 1
        self._prefix(body)
        try:
            await self._stream(body, writer, mode, prompt, self.tokens or max_tokens)
        finally:
            self.active -= 1

    def _prefix(self, body: dict[str, Any]) -> None:
        # Prefix-cache bookkeeping in 64-character "blocks" of the system message.
        text = str((body.get("messages") or [{}])[0].get("content") or "")
        blocks = [text[: i + 64] for i in range(0, len(text) - 63, 64)]
        self.counters["queries"] += _tokens(text)
        self.counters["hits"] += sum(16 for b in blocks if b in self._seen_prefixes)
        self._seen_prefixes.update(blocks)

    async def _stream(self, body: dict[str, Any], writer: asyncio.StreamWriter, mode: str, prompt: int, n: int) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        await self._chunked(writer, self._chunk({"role": "assistant", "content": ""}))
        if mode == "stall":
            await writer.drain()
            await asyncio.sleep(3600)
        if mode == "malformed":
            await self._chunked(writer, "this is not an event stream\n\n")
        if mode == "badjson":
            await self._chunked(writer, "data: {not json\n\n")
        choice = body.get("tool_choice")
        tools = body.get("tools") or []
        forced = tools and (choice == "required" or isinstance(choice, dict))
        finish = "length"
        if self.reasoning:
            await self._chunked(writer, self._chunk({"reasoning": "thinking about it "}))
        if mode == "think_in_content":
            await self._chunked(writer, self._chunk({"content": "<think>hmm</think>"}))
        if forced:
            name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
            tool = next(t for t in tools if t["function"]["name"] == name)
            args = _args_for(tool, valid=mode != "badtool")
            await self._chunked(
                writer,
                self._chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "chatcmpl-tool-1",
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                ),
            )
            for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                await self._chunked(
                    writer, self._chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                )
                await writer.drain()
                await asyncio.sleep(self.token_delay_s * 10)  # a call takes time like any decode
            n, finish = 2, "stop" if isinstance(choice, dict) else "tool_calls"
        else:
            seed = int(body.get("seed") or 0)
            for i in range(n):
                await self._chunked(writer, self._chunk({"content": f"t{(seed + i) % 97} "}))
                if i == 2 and mode == "inband_engine":
                    self.dead = True
                    await self._chunked(writer, f"data: {json.dumps({'error': VLLM_DEAD})}\n\n")
                    await self._chunked(writer, "data: [DONE]\n\n")
                    writer.write(b"0\r\n\r\n")
                    return
                if self.die_after_tokens is not None:
                    self.die_after_tokens -= 1
                    if self.die_after_tokens <= 0:
                        self.kill()
                        return
                self.counters["generation"] += 1
                await writer.drain()
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
        self.counters["prompt"] += prompt
        self.finished[finish] = self.finished.get(finish, 0) + 1
        await self._chunked(writer, self._chunk({"content": ""}, finish))
        if mode != "no_usage":
            usage = {
                "prompt_tokens": prompt,
                "total_tokens": prompt + n,
                "completion_tokens": n,
                "prompt_tokens_details": {"cached_tokens": 16},
            }
            await self._chunked(writer, self._chunk(None, usage=usage))
        await self._chunked(writer, "data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    # -- /metrics --------------------------------------------------------------------------
    def metrics_text(self) -> str:
        lab = 'engine="0",model_name="fake-model"'
        usage_name = "vllm:gpu_cache_usage_perc" if self.legacy_metrics else "vllm:kv_cache_usage_perc"
        prefix = "vllm:gpu_prefix_cache" if self.legacy_metrics else "vllm:prefix_cache"
        running = min(self.active, self.kv_capacity)
        waiting = max(0, self.active - self.kv_capacity)
        c = self.counters
        lines = [
            f"# TYPE {usage_name} gauge",
            f"{usage_name}{{{lab}}} {min(1.0, self.active / self.kv_capacity)}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {waiting}",
            "# TYPE vllm:num_requests_waiting_by_reason gauge",
            f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} {waiting}',
            f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} 0',
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{{{lab}}} {c['preemptions']}",
            f"# TYPE {prefix}_queries counter",
            f"{prefix}_queries_total{{{lab}}} {c['queries']}",
            f"# TYPE {prefix}_hits counter",
            f"{prefix}_hits_total{{{lab}}} {c['hits']}",
            "# TYPE vllm:prompt_tokens counter",
            f"vllm:prompt_tokens_total{{{lab}}} {c['prompt']}",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total{{{lab}}} {c['generation']}",
            "# TYPE vllm:request_success counter",
            *[f'vllm:request_success_total{{{lab},finished_reason="{k}"}} {v}' for k, v in self.finished.items()],
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",{lab},num_gpu_blocks="64"}} 1.0',
        ]
        return "\n".join(lines) + "\n"
