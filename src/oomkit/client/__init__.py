"""Async streaming OpenAI-compatible chat client: per-request records, error classes, tool-call
validation against JSON Schema, and a probe for the server behind a URL."""

from oomkit.client.chat import ChatClient, ChatRequest, ClientOptions
from oomkit.client.probe import ServerInfo, health, normalise_url, probe
from oomkit.client.records import ERROR_KINDS, RequestRecord, ToolCall, ToolCheck
from oomkit.client.tools import check_tool_calls

__all__ = [
    "ChatClient",
    "ChatRequest",
    "ClientOptions",
    "ERROR_KINDS",
    "RequestRecord",
    "ServerInfo",
    "ToolCall",
    "ToolCheck",
    "check_tool_calls",
    "health",
    "normalise_url",
    "probe",
]
