"""Fit a request set to the server's context before any load. vLLM answers a request whose prompt
plus max_tokens exceeds max_model_len with HTTP 400 before doing any work (vllm-internals.md §3,
E-REQLEN), so a request set that does not fit measures nothing and a 400 reads like a failure.

A request that is too long loses history, oldest turn first: a turn is an assistant message with
the tool results that answer it, so no tool call is left without its result. The system prompt,
the task and the step's own last message are kept. A request still too long without any history
is refused before any load: `DoesNotFit` names it and by how many tokens it is over.

Sizes come from the request set itself: `prompt_tokens` where it was measured through the
server's chat template, else the sum of its parts plus a template margin (TEMPLATE_TOKENS_*)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from oomkit.errors import InputError
from oomkit.fsio import json_list, json_object, json_objects
from oomkit.serial import Json, JsonObject, to_json_object, to_jsonable
from oomkit.workload.requestset import RequestSet, SetRequest, body_id, messages_of, with_messages
from oomkit.workload.tokens import CHARS_PER_TOKEN

# A chat template wraps each message in role markers (Llama 3: 5 tokens, ChatML: 4-5) and, with
# tools, adds its own instructions around the tool definitions (Hermes and Qwen 2.5 templates:
# 100-200 tokens). Added only to prompts NOT measured through the server's template (no
# `prompt_tokens`: /tokenize unavailable or the template failed); a measured size includes them.
TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_WITH_TOOLS = 200
# The parts materialise.py counts; their sum is the prompt when it was not measured as a whole.
PARTS = ("system_instruction", "format_rules", "user_task", "history", "workflow_metadata", "tools")

Messages = list[JsonObject]


@dataclass(frozen=True)
class Trimmed:
    """One request that lost history to fit."""

    request_id_before: str
    request_id: str
    kind: str
    session: int | None
    step: int | None
    tokens_before: int
    """Estimated prompt plus max_tokens, as materialised."""
    tokens_after: int
    messages_dropped: int
    turns_dropped: int


@dataclass(frozen=True)
class Refusal:
    """One request that does not fit even with no history left."""

    request_id: str
    kind: str
    session: int | None
    step: int | None
    prompt_tokens: int
    """Estimated prompt without any history."""
    max_tokens: int
    max_model_len: int

    @property
    def over_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens - self.max_model_len

    def to_dict(self) -> JsonObject:
        return {**to_json_object(self), "over_tokens": self.over_tokens}

    def line(self) -> str:
        where = f"agent session {self.session} step {self.step}" if self.kind == "agent" else f"{self.kind} probe"
        return (
            f"request {self.request_id} ({where}) needs {self.prompt_tokens + self.max_tokens} tokens "
            f"(prompt ~{self.prompt_tokens} + max_tokens {self.max_tokens}), the server's max_model_len is "
            f"{self.max_model_len}: over by {self.over_tokens} tokens"
        )


@dataclass(frozen=True)
class FitReport:
    max_model_len: int | None
    """None: the server did not say; nothing was fitted."""
    requests: int
    trimmed: tuple[Trimmed, ...] = ()
    set_id_before: str = ""
    set_id_after: str = ""

    def note(self) -> str | None:
        """One line for the output, or None when the set fits as materialised."""
        if self.max_model_len is None:
            return "max_model_len unknown (the server does not report it): the request set was not fitted"
        if not self.trimmed:
            return None
        n = len(self.trimmed)
        return f"fitted to max_model_len {self.max_model_len}: {n} request{'s' if n != 1 else ''} trimmed (history)"

    def to_dict(self) -> JsonObject:
        return {
            "max_model_len": self.max_model_len,
            "fitted": self.max_model_len is not None,
            "requests": self.requests,
            "request_set_before": self.set_id_before,
            "request_set": self.set_id_after,
            "trimmed": to_jsonable(self.trimmed),
            "estimate": ESTIMATE_NOTE,
        }


ESTIMATE_NOTE = (
    "prompt tokens as measured through the server's chat template (sizes.prompt_tokens), else the sum of "
    f"the parts plus {TEMPLATE_TOKENS_PER_MESSAGE} per message and {TEMPLATE_TOKENS_WITH_TOOLS} with tools; "
    "a dropped turn frees its share of the history's text and its tool calls, not the template's role markers"
)


class DoesNotFit(InputError):
    """A request is longer than max_model_len even with no history: refused before any load."""

    def __init__(self, refusals: tuple[Refusal, ...]):
        first, rest = refusals[0], refusals[1:]
        more = f" (and {len(rest)} more, up to {max(r.over_tokens for r in rest)} over)" if rest else ""
        super().__init__(
            first.line() + more,
            hint="dropping history is not enough: use a workload with a shorter system prompt, fewer or smaller "
            "tools or fewer output_tokens, or serve a larger --max-model-len",
        )
        self.refusals = refusals

    def to_dict(self) -> JsonObject:
        return {
            "max_model_len": self.refusals[0].max_model_len,
            "fitted": False,
            "error": self.one_line(),
            "refused": [r.to_dict() for r in self.refusals],
            "estimate": ESTIMATE_NOTE,
        }


def split_turns(body_messages: Json | None) -> tuple[Messages, list[Messages], Messages]:
    """(head, turns, tail) of a body's `messages`: the system prompt and the task, the history as
    turns (an assistant message and the messages that answer it), the step's own last message."""
    messages = [m for m in json_list(body_messages) if isinstance(m, dict)]
    head_len = min(2 if messages and messages[0].get("role") == "system" else 1, len(messages))
    if len(messages) <= head_len:
        return list(messages), [], []
    turns: list[Messages] = []
    for m in messages[head_len:-1]:
        if m.get("role") == "assistant" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return list(messages[:head_len]), turns, list(messages[-1:])


def max_tokens_of(req: SetRequest) -> int:
    """The output the server reserves room for; without max_tokens vLLM fills the rest (at least 1)."""
    value = req.body.get("max_tokens") or req.body.get("max_completion_tokens")
    return int(value) if isinstance(value, int) else 1


def prompt_tokens_estimate(req: SetRequest) -> int:
    """The prompt in the server's tokens: measured through its template when the set says so."""
    for key in ("prompt_tokens", "prompt_tokens_estimate"):
        if isinstance(req.sizes.get(key), int):
            return int(req.sizes[key])
    messages = messages_of(req.body)
    parts = sum(v for k, v in req.sizes.items() if k in PARTS and isinstance(v, int))
    text = sum(len(_text(m)) for m in messages) + len(json.dumps(req.body.get("tools") or ""))
    margin = TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + (TEMPLATE_TOKENS_WITH_TOOLS if req.body.get("tools") else 0)
    return max(parts, math.ceil(text / CHARS_PER_TOKEN)) + margin


def _text(m: JsonObject) -> str:
    return str(m.get("content") or "") + (json.dumps(m["tool_calls"]) if m.get("tool_calls") else "")


def _content_chars(turn: Messages) -> int:
    return sum(len(str(m.get("content") or "")) for m in turn)


def _call_tokens(turn: Messages) -> int:
    """The tool calls as a template renders them: each function's name and arguments."""
    calls = [json_object(c.get("function")) for m in turn for c in json_objects(m.get("tool_calls"))]
    return sum(
        math.floor((len(str(f.get("name", ""))) + len(str(f.get("arguments", "")))) / CHARS_PER_TOKEN) for f in calls
    )


def turn_tokens(req: SetRequest, turns: list[Messages]) -> list[int]:
    """Tokens dropping each turn frees: its share of the set's `history` size (the text, in the
    server's tokens) by characters, plus its tool calls. The template's role markers are not
    counted, so a trimmed request is estimated a few tokens long rather than short."""
    chars = [_content_chars(t) for t in turns]
    history = req.sizes.get("history")
    if isinstance(history, int) and history > 0 and sum(chars) > 0:
        text = [history * c // sum(chars) for c in chars]
    else:
        text = [math.floor(c / CHARS_PER_TOKEN) for c in chars]
    return [t + _call_tokens(turn) for t, turn in zip(text, turns, strict=True)]


def fit_request(req: SetRequest, max_model_len: int) -> tuple[SetRequest, Trimmed | None] | Refusal:
    """The request as it is when it fits; else trimmed to fit; else the Refusal."""
    output = max_tokens_of(req)
    prompt = prompt_tokens_estimate(req)
    if prompt + output <= max_model_len:
        return req, None
    turns = split_turns(req.body.get("messages"))[1]
    freed = turn_tokens(req, turns)
    drop = 0
    while drop < len(turns) and prompt - sum(freed[:drop]) + output > max_model_len:
        drop += 1
    after = prompt - sum(freed[:drop])
    if after + output > max_model_len:
        return Refusal(req.id, req.kind, req.session, req.step, after, output, max_model_len)
    new = without_turns(req, drop, after)
    dropped = sum(len(t) for t in turns[:drop])
    return new, Trimmed(req.id, new.id, req.kind, req.session, req.step, prompt + output, after + output, dropped, drop)


def without_turns(req: SetRequest, drop: int, prompt_tokens: int) -> SetRequest:
    """The request without its `drop` oldest turns; its sizes say the prompt is now an estimate."""
    head, turns, tail = split_turns(req.body.get("messages"))
    body = with_messages(req.body, head + [m for t in turns[drop:] for m in t] + tail)
    chars = [_content_chars(t) for t in turns]
    history = int(req.sizes.get("history", 0))
    sizes = {k: v for k, v in req.sizes.items() if k != "prompt_tokens"}
    sizes.update(
        prompt_tokens_estimate=prompt_tokens,
        history=history * sum(chars[drop:]) // sum(chars) if sum(chars) else 0,
        history_turns_dropped=drop,
    )
    return SetRequest(body_id(body), req.kind, req.session, req.step, body, sizes)


def fit_request_set(rs: RequestSet, max_model_len: int | None) -> tuple[RequestSet, FitReport]:
    """The set with every request fitted to `max_model_len` (None: unknown, the set as it is).
    Raises DoesNotFit, naming the first request that cannot fit, when any cannot."""
    if max_model_len is None:
        return rs, FitReport(None, len(rs.requests), (), rs.id, rs.id)
    fitted: list[SetRequest] = []
    trimmed: list[Trimmed] = []
    refused: list[Refusal] = []
    for req in rs.requests:
        out = fit_request(req, max_model_len)
        if isinstance(out, Refusal):
            refused.append(out)
            continue
        fitted.append(out[0])
        trimmed += [out[1]] if out[1] else []
    if refused:
        raise DoesNotFit(tuple(refused))
    if not trimmed:
        return rs, FitReport(max_model_len, len(rs.requests), (), rs.id, rs.id)
    header = {k: v for k, v in rs.header.items() if k not in ("id", "requests")}
    header["fitted"] = {"max_model_len": max_model_len, "request_set_before": rs.id, "trimmed": len(trimmed)}
    out_set = RequestSet.build(header, fitted)
    return out_set, FitReport(max_model_len, len(rs.requests), tuple(trimmed), rs.id, out_set.id)
