"""The streaming OpenAI-compatible chat client: one `RequestRecord` per request, never an
exception for a request that failed (that is a value with an error class)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace

import httpx

from oomkit.client import classify
from oomkit.client.records import RequestRecord, ToolCall
from oomkit.client.sse import MalformedStream, SseDecoder
from oomkit.client.tools import check_tool_calls
from oomkit.client.transport import Http11Transport
from oomkit.redact import redact
from oomkit.serial import Json, JsonObject

ERROR_TEXT_CHARS = 500
RETRYABLE = ("refused", "reset")  # before any token: the request did not reach the engine
RETRY_PAUSE_S = 0.5
_loads = json.JSONDecoder().decode


@dataclass(frozen=True)
class ChatRequest:
    request_id: str
    body: JsonObject
    """The chat completion body without `model` and the streaming fields (the client adds them)."""
    label: str = ""
    session: int | None = None
    step: int | None = None


@dataclass(frozen=True)
class ClientOptions:
    timeout_s: float = 600.0
    """The whole request, first byte to last."""
    stall_timeout_s: float = 120.0
    """The longest silence allowed between two reads of the stream (also the wait for the head)."""
    connect_timeout_s: float = 10.0
    max_retries: int = 0
    """Retries of a request refused or reset before its first token."""
    tool_retries: int = 0
    """Retries of a request whose tool calls did not validate (the Kimi K3 recipe's advice)."""


@dataclass(slots=True)
class _CallParts:
    """One streamed tool call, put together from its deltas."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Stream:
    """Everything accumulated from one response stream."""

    t0: float
    status: int | None = None
    """The HTTP status, once the response head has arrived."""
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _CallParts] = field(default_factory=dict)  # by the call's index
    first_s: float | None = None
    last_token_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)
    chunks: int = 0
    saw_choices: bool = False
    finish_reason: str | None = None
    usage: JsonObject | None = None
    done: bool = False
    error_kind: str | None = None
    error: str | None = None
    end_s: float | None = None

    def event(self, data: str, now: float) -> None:
        # Runs once per streamed token: keep it flat (benchmarks/client_overhead.py).
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = _loads(data)
        except ValueError as err:
            raise MalformedStream(f"event data is not JSON: {data[:80]!r}") from err
        if not isinstance(obj, dict):
            raise MalformedStream(f"event data is not a JSON object: {data[:80]!r}")
        choices = obj.get("choices")
        if choices:
            self.saw_choices = True
            choice = choices[0]
            delta = choice.get("delta")
            if delta and self._delta(delta):
                if self.last_token_s is None:  # set with first_s: this is the first token
                    self.first_s = now
                else:
                    self.gaps_s.append(now - self.last_token_s)
                self.last_token_s = now
                self.chunks += 1
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        elif choices is not None:
            self.saw_choices = True
        if "error" in obj:
            self.error_kind = classify.from_inband(obj["error"])
            self.error = json.dumps(obj["error"])[:ERROR_TEXT_CHARS]
        if obj.get("usage"):
            self.usage = obj["usage"]

    def _delta(self, delta: JsonObject) -> bool:
        """Accumulate one delta; True when it carried a token (text, reasoning or a call)."""
        got = False
        text = delta.get("content")
        if text:
            self.content.append(str(text))
            got = True
        thought = delta.get("reasoning") or delta.get("reasoning_content")
        if thought:
            self.reasoning.append(str(thought))
            got = True
        calls = delta.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise MalformedStream(f"tool_calls is not a list: {str(calls)[:80]!r}")
            for tc in calls:
                self._call_delta(tc)
            got = True
        return got

    def _call_delta(self, tc: Json) -> None:
        if not isinstance(tc, dict):
            raise MalformedStream(f"a tool call delta is not an object: {str(tc)[:80]!r}")
        index, fn = tc.get("index"), tc.get("function") or {}
        if not isinstance(fn, dict):
            raise MalformedStream(f"a tool call's function is not an object: {str(fn)[:80]!r}")
        slot = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), _CallParts())
        slot.id = slot.id or _text(tc.get("id"))
        slot.name = slot.name or _text(fn.get("name"))
        if fn.get("arguments"):
            slot.arguments.append(str(fn["arguments"]))

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(s.id, s.name, "".join(s.arguments)) for _, s in sorted(self.calls.items()))


def _text(value: Json | None) -> str | None:
    return None if value is None else str(value)


def _count(value: Json | None) -> int | None:
    return value if isinstance(value, int) else None


class ChatClient:
    """Async streaming client. Use as `async with ChatClient(url) as c: rec = await c.chat(req)`."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        options: ClientOptions = ClientOptions(),
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.options = options
        headers = {"accept-encoding": "identity", "user-agent": "oomkit"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        timeout = httpx.Timeout(
            connect=options.connect_timeout_s, read=options.stall_timeout_s, write=options.stall_timeout_s, pool=None
        )
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            mounts={"http://": Http11Transport()},
            trust_env=False,
        )

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def chat(self, req: ChatRequest) -> RequestRecord:
        """Send one request (with the configured retries) and return its record."""
        started = time.time()
        retries = invalid = 0
        while True:
            rec = await self._attempt(req, started)
            if not rec.ok and rec.error_kind in RETRYABLE and rec.chunks == 0 and retries < self.options.max_retries:
                retries += 1
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if rec.ok and rec.tool_check and not rec.tool_check.valid and invalid < self.options.tool_retries:
                invalid += 1
                retries += 1
                continue
            return replace(
                rec,
                retries=retries,
                attempts_invalid_tools=invalid + int(bool(rec.tool_check and not rec.tool_check.valid)),
            )

    def _payload(self, req: ChatRequest) -> JsonObject:
        body = dict(req.body)
        if self.model and "model" not in body:
            body["model"] = self.model
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    async def _attempt(self, req: ChatRequest, started: float) -> RequestRecord:
        st = _Stream(t0=time.perf_counter())
        try:
            async with asyncio.timeout(self.options.timeout_s):
                await self._exchange(req, st)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            st.error_kind, st.error = "timeout", f"no complete answer within {self.options.timeout_s:g} s"
        except httpx.ReadTimeout:
            st.error_kind, st.error = "timeout", self._stalled(st)
        except Exception as err:  # every failure of one request becomes a value
            st.error_kind = classify.from_exception(err)
            st.error = f"{type(err).__name__}: {err}"[:ERROR_TEXT_CHARS]
        return self._record(req, started, st, st.status)

    def _stalled(self, st: _Stream) -> str:
        wait = f"{self.options.stall_timeout_s:g} s (stall timeout)"
        if st.status is None:
            return f"stalled: no response head within {wait}"
        return f"stalled: nothing more for {wait} after {st.chunks} token chunks"

    async def _exchange(self, req: ChatRequest, st: _Stream) -> None:
        async with self.http.stream("POST", "/v1/chat/completions", json=self._payload(req)) as resp:
            st.status = resp.status_code
            if resp.status_code != 200:
                body = (await resp.aread()).decode("utf-8", "replace")
                st.error_kind = classify.from_status(resp.status_code, body)
                st.error = f"HTTP {resp.status_code}: {body}"[:ERROR_TEXT_CHARS]
                return
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                st.error_kind = "not_openai" if "json" not in ctype else "malformed_stream"
                st.error = f"expected text/event-stream, got {ctype or 'no content-type'}"
                return
            decoder = SseDecoder()
            try:
                async for piece in resp.aiter_raw():
                    now = time.perf_counter()
                    if st.done:
                        continue  # read the body to its end so the connection can be reused
                    for data in decoder.feed(piece):
                        st.event(data, now)
                    if st.done:
                        st.end_s = now
                    elif st.error_kind:
                        break
            except (httpx.ReadError, httpx.RemoteProtocolError):
                if not st.done:
                    raise  # a body cut after [DONE] lost nothing
            if not st.done and not st.error_kind:
                for data in decoder.close():
                    st.event(data, time.perf_counter())
            st.end_s = st.end_s or time.perf_counter()

    def _record(self, req: ChatRequest, started: float, st: _Stream, status: int | None) -> RequestRecord:
        kind, error = st.error_kind, st.error
        if kind is None and not st.done and st.finish_reason is None:
            kind, error = "reset", "the stream ended before [DONE] and without a finish_reason"
        if kind is None and not st.saw_choices:
            kind, error = "not_openai", "the stream carried no `choices`: not an OpenAI chat completion"
        usage = st.usage or {}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        end_s = st.end_s or time.perf_counter()
        calls = st.tool_calls()
        content = "".join(st.content)
        check = (
            check_tool_calls(
                calls, req.body.get("tools"), req.body.get("tool_choice", "auto"), st.finish_reason, content
            )
            if kind is None
            else None
        )
        return RequestRecord(
            request_id=req.request_id,
            label=req.label,
            session=req.session,
            step=req.step,
            started_unix_s=started,
            ok=kind is None,
            error_kind=kind,
            error=redact(error) if error else None,
            http_status=status,
            ttft_ms=(st.first_s - st.t0) * 1000 if st.first_s is not None else None,
            latency_ms=(end_s - st.t0) * 1000,
            itl_ms=tuple(g * 1000 for g in st.gaps_s),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
            cached_tokens=_count(cached),
            chunks=st.chunks,
            finish_reason=st.finish_reason,
            content=content,
            reasoning="".join(st.reasoning) if st.reasoning else None,
            tool_calls=calls,
            tool_check=check,
        )
