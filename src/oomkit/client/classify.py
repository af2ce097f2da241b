"""Error classes from what the client saw (status, body, exception). Data first, then two
functions; see records.ERROR_KINDS for the meaning of each class."""

from __future__ import annotations

import re

import httpx

from oomkit.client.sse import MalformedStream

# HTTP 400 texts that mean "the request does not fit the context" (vllm-internals.md §3, E-REQLEN;
# OpenAI's own wording is "maximum context length"; SGLang/TGI say "longer than"/"must have less").
CONTEXT_LENGTH = re.compile(
    r"maximum context length|longer than the maximum model length|context length|"
    r"is longer than the model's context|must have less than \d+ tokens|max_model_len",
    re.I,
)
# vLLM's message when the engine core died (cpu-testbed.md §9: HTTP 500 body and in-band event).
ENGINE_DEAD = re.compile(r"EngineCore encountered an issue|EngineDeadError|engine (?:core )?(?:is )?dead", re.I)


def from_status(status: int, body: str) -> str:
    if status == 400 and CONTEXT_LENGTH.search(body):
        return "context_length"
    if status in (404, 405):
        return "not_openai"
    if 400 <= status < 500:
        return "bad_request"
    if ENGINE_DEAD.search(body):
        return "engine_dead"
    return "http_5xx"


def from_inband(error: object) -> str:
    """An `{"error": {...}}` event inside a 200 stream."""
    message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
    code = error.get("code") if isinstance(error, dict) else None
    if ENGINE_DEAD.search(message):
        return "engine_dead"
    try:
        status = int(code) if code is not None else 500
    except (TypeError, ValueError):
        status = 500
    return from_status(status, message)


def from_exception(err: BaseException) -> str:
    if isinstance(err, httpx.ConnectError):
        return "refused"
    if isinstance(err, (httpx.TimeoutException, TimeoutError)):
        return "timeout"
    if isinstance(err, (MalformedStream, ValueError)):
        return "malformed_stream"
    if isinstance(err, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, ConnectionError)):
        return "reset"
    if isinstance(err, httpx.UnsupportedProtocol):
        return "not_openai"
    return "reset"
