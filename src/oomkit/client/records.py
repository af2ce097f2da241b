"""What one request did: the record written to requests.jsonl for every finished request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oomkit.serial import JsonObject, to_json_object

# Error classes a request can end with (None: it succeeded). Sources: shared/research/cpu-testbed.md
# §9 (engine death: HTTP 500 "EngineCore encountered an issue", or an in-band error event after a
# 200), vllm-internals.md §3 (E-REQLEN: HTTP 400 "maximum context length").
ERROR_KINDS = (
    "refused",  # connection refused: nothing listens (server gone or not started)
    "reset",  # connection reset or closed in the middle of a response
    "timeout",  # no first byte / no next byte within the per-request timeout
    "context_length",  # HTTP 400: the prompt plus max_tokens exceeds the model's context
    "bad_request",  # any other HTTP 4xx
    "http_5xx",  # HTTP 5xx that is not an engine death
    "engine_dead",  # vLLM's engine core died (HTTP 500 or in-band error naming EngineCore)
    "malformed_stream",  # a body that is not server-sent events of JSON chunks
    "not_openai",  # the endpoint does not speak the OpenAI chat API (404, HTML, no choices)
    "interrupted",  # cancelled by Ctrl-C or by the end of a --duration run
    "client_lost",  # the client process or Ray actor that held it died (--clients): not the server's doing
)


@dataclass(frozen=True)
class ToolCall:
    id: str | None
    name: str | None
    arguments: str
    """The raw JSON text the server returned (OpenAI sends arguments as a string)."""

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass(frozen=True)
class ToolCheck:
    """Tool calls of one response validated against the tool definitions that were sent."""

    valid: bool
    problems: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    label: str
    """Which part of a run sent it (ladder step or rung, bench)."""
    session: int | None
    step: int | None
    started_unix_s: float
    ok: bool
    error_kind: str | None = None
    error: str | None = None
    http_status: int | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None
    itl_ms: tuple[float, ...] = ()
    """Gaps between consecutive token-carrying chunks (chunks read together have gap 0)."""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    """From the server's `usage` (asked for with stream_options.include_usage)."""
    cached_tokens: int | None = None
    """usage.prompt_tokens_details.cached_tokens, when the server reports it."""
    chunks: int = 0
    finish_reason: str | None = None
    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_check: ToolCheck | None = None
    retries: int = 0
    """Extra attempts made (transport errors and invalid tool calls), all counted here."""
    attempts_invalid_tools: int = 0
    extra: JsonObject = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        d = to_json_object(self)
        d["itl_ms"] = [round(x, 3) for x in self.itl_ms]
        d["ttft_ms"] = None if self.ttft_ms is None else round(self.ttft_ms, 3)
        d["latency_ms"] = None if self.latency_ms is None else round(self.latency_ms, 3)
        return d

    def fingerprint(self) -> tuple[Any, ...]:
        """What must repeat for a run to count as identical: the text and the tool calls."""
        return (self.content, self.reasoning, tuple((c.name, c.arguments) for c in self.tool_calls), self.finish_reason)
