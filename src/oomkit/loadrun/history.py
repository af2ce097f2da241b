"""A request with its history grown: the ladder's history doubling and compare's `context_factor`
send the same transformation, so a context measured by one is the context the other compares."""

from __future__ import annotations

from oomkit.fsio import json_objects
from oomkit.serial import Json, JsonObject
from oomkit.workload.requestset import SetRequest, body_id, messages_of, with_messages


def scaled(req: SetRequest, factor: int) -> SetRequest:
    """The request with its history repeated `factor` times (tool-call ids kept unique); a request
    without history repeats its user task instead."""
    msgs = messages_of(req.body)
    head, middle, tail = msgs[:2], msgs[2:-1], msgs[-1:]
    if not middle:
        head, middle = msgs[:1], msgs[1:-1] or msgs[-1:]
        tail = msgs[-1:] if msgs[1:-1] else []
    grown: list[JsonObject] = []
    for copy in range(factor):
        for m in middle:
            m = dict(m)
            if copy and m.get("tool_calls"):
                calls: list[Json] = [{**c, "id": f"{c['id']}_r{copy}"} for c in json_objects(m["tool_calls"])]
                m["tool_calls"] = calls
            if copy and m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}_r{copy}"
            grown.append(m)
    body = with_messages(req.body, head + grown + tail)
    sizes = dict(req.sizes)
    prompt = sizes.get("prompt_tokens", sizes.get("prompt_tokens_estimate"))  # a fitted request has an estimate
    if prompt is not None:
        sizes["prompt_tokens_estimate"] = prompt + (factor - 1) * sizes.get("history", 0)
    return SetRequest(body_id(body), "agent", req.session, req.step, body, sizes)
