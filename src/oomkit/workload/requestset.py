"""The request set: a workload materialised into concrete requests (JSONL), reused unchanged by
later runs so that "before" and "after" send the very same requests.

Line 1 is the header (`kind: oomkit.request_set/1`, the set id, the workload, how tokens were
counted); every further line is one request with its own content hash. The set id is the hash of
the request ids, so editing any request is detected when the file is read back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from oomkit.errors import InputError
from oomkit.fsio import JSON_ERRORS, json_list, json_object, read_text_limited, write_text_atomic
from oomkit.serial import Json, JsonObject

KIND = "oomkit.request_set/1"
KINDS = ("short", "tool", "agent")
# Agent requests carry their whole history: 10,000 of them at 32k tokens is over 1 GiB.
REQUEST_SET_LIMIT_BYTES = 2 * 2**30


def canonical(obj: Json) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def body_id(body: JsonObject) -> str:
    return hashlib.sha256(canonical(body).encode()).hexdigest()[:16]


def messages_of(body: JsonObject) -> list[JsonObject]:
    """A chat body's messages (`read_request_set` refuses a set whose messages are not objects)."""
    return [m for m in json_list(body.get("messages")) if isinstance(m, dict)]


def with_messages(body: JsonObject, messages: Iterable[JsonObject]) -> JsonObject:
    """`body` with other messages, every other field kept in its place."""
    new: list[Json] = [*messages]
    return {**body, "messages": new}


@dataclass(frozen=True)
class SetRequest:
    id: str
    kind: str
    """short (ladder step 1), tool (step 2) or agent (a step of a session)."""
    session: int | None
    step: int | None
    body: JsonObject
    """The chat completion body as sent (an OpenAI request: raw JSON, also when read back)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """Token sizes of the parts, and prompt_tokens through the chat template when measured."""

    def to_dict(self) -> JsonObject:
        return {
            "id": self.id,
            "kind": self.kind,
            "session": self.session,
            "step": self.step,
            "sizes": {**self.sizes},
            "body": self.body,
        }


@dataclass(frozen=True)
class RequestSet:
    id: str
    header: JsonObject
    """Line 1 of the file: kind, id, the workload, how tokens were counted."""
    requests: tuple[SetRequest, ...]

    @classmethod
    def build(cls, header: JsonObject, requests: list[SetRequest]) -> RequestSet:
        set_id = hashlib.sha256("".join(r.id for r in requests).encode()).hexdigest()[:16]
        return cls(set_id, {**header, "kind": KIND, "id": set_id, "requests": len(requests)}, tuple(requests))

    def probe(self, kind: str) -> SetRequest | None:
        return next((r for r in self.requests if r.kind == kind), None)

    def sessions(self) -> list[list[SetRequest]]:
        by: dict[int, list[SetRequest]] = {}
        for r in self.requests:
            if r.kind == "agent" and r.session is not None:
                by.setdefault(r.session, []).append(r)
        return [sorted(v, key=lambda r: r.step or 0) for _, v in sorted(by.items())]

    def write(self, path: str | os.PathLike[str]) -> Path:
        lines = [canonical(self.header)] + [canonical(r.to_dict()) for r in self.requests]
        return write_text_atomic(path, "\n".join(lines) + "\n")


def read_request_set(path: str | os.PathLike[str]) -> RequestSet:
    p = Path(path)
    text = read_text_limited(p, REQUEST_SET_LIMIT_BYTES, "request set", hint="request sets are written by oomkit")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        header = json.loads(lines[0]) if lines else {}
        items = [json.loads(ln) for ln in lines[1:]]
    except JSON_ERRORS as err:
        raise InputError(f"{p}: not JSON ({str(err)[:120]})", hint="request sets are written by oomkit") from None
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise InputError(f"{p}: not an oomkit request set (first line must have kind {KIND})")
    requests = [_request(p, i + 2, d) for i, d in enumerate(items)]
    rs = RequestSet.build({k: v for k, v in header.items() if k not in ("id", "requests")}, requests)
    if rs.id != header.get("id"):
        raise InputError(
            f"{p}: the set id {header.get('id')} does not match its requests ({rs.id})",
            hint="a request set must be reused unchanged; materialise the workload again",
        )
    return rs


def _request(p: Path, line: int, d: Json) -> SetRequest:
    try:
        if not isinstance(d, dict) or not isinstance(d["body"], dict):
            raise TypeError("not an object")
        sizes = {k: v for k, v in json_object(d.get("sizes")).items() if isinstance(v, int)}
        req = SetRequest(
            str(d["id"]), str(d["kind"]), _index(d.get("session")), _index(d.get("step")), d["body"], sizes
        )
        content_id = body_id(req.body)
    except (KeyError, TypeError, ValueError):  # ValueError: also a lone surrogate (\ud800) in the body
        raise InputError(f"{p}: line {line}: not a request (id, kind, body expected)") from None
    messages = req.body.get("messages")
    if req.kind not in KINDS or not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InputError(f"{p}: line {line}: kind must be one of {KINDS} and body must have messages")
    if content_id != req.id:
        raise InputError(
            f"{p}: line {line}: request {req.id} was edited (its content hash differs)",
            hint="a request set must be reused unchanged; materialise the workload again",
        )
    return req


def _index(value: Json | None) -> int | None:
    """A session or step number as written (an int), None when there is none."""
    return value if isinstance(value, int) else None
