"""Client-side factors applied to the same request set: the sessions a cell sends, each request
rewritten the same way for every repeat (history cut or repeated, max_tokens changed)."""

from __future__ import annotations

from oomkit.compare.spec import Mode
from oomkit.loadrun.history import scaled
from oomkit.serial import JsonObject
from oomkit.workload.fit import split_turns
from oomkit.workload.requestset import RequestSet, SetRequest, body_id


def cut_history(req: SetRequest, turns: int) -> SetRequest:
    """Keep the system prompt, the task, the last `turns` earlier steps and the step's own message.
    An earlier step is an assistant message and the tool results that answer it."""
    head, steps, tail = split_turns(req.body["messages"])
    kept = [m for step in (steps[-turns:] if turns else []) for m in step]
    if len(kept) == sum(len(step) for step in steps):
        return req
    body: JsonObject = {**req.body, "messages": [*head, *kept, *tail]}
    sizes = {**req.sizes, "history_turns_kept": min(turns, len(steps))}
    return SetRequest(body_id(body), req.kind, req.session, req.step, body, sizes)


def sessions_for(rs: RequestSet, mode: Mode, sessions: int | None, steps: int | None) -> list[list[SetRequest]]:
    """The sessions one cell of `mode` sends: the set's sessions in order (repeated to `sessions`),
    each cut to `steps`, with the mode's client-side rewrite applied."""
    base = rs.sessions()
    if not base:
        return []
    count = sessions or len(base)
    chosen = [base[i % len(base)][: steps or None] for i in range(count)]
    if mode.factor == "history_turns":
        return [[cut_history(r, mode.whole()) for r in s] for s in chosen]
    if mode.factor == "context_factor":
        return [[scaled(r, mode.whole()) for r in s] for s in chosen]
    return chosen


def overrides_for(mode: Mode) -> JsonObject:
    """Body fields the mode sets on every request."""
    if mode.factor == "output_tokens":
        return {"max_tokens": mode.whole()}
    return {}


def concurrency_for(mode: Mode, baseline: int) -> int:
    return mode.whole() if mode.factor == "concurrency" else baseline
