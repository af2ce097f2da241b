"""The traffic a forecast sends: agent sessions as token sizes of their parts, from the same files
`oomkit ladder` and `oomkit bench` read. A request set (request-set.jsonl, written by every run)
gives the exact sizes its server's tokenizer measured, prompt_tokens through the chat template
included; a workload YAML is drawn from its ranges with its seed, without materialising any text,
so 1,000 sessions of 64k-token histories cost sizes, not gigabytes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from oomkit.errors import InputError
from oomkit.loadrun.prepare import is_request_set
from oomkit.serial import Json
from oomkit.workload.requestset import RequestSet, SetRequest, read_request_set
from oomkit.workload.spec import DEFAULT_WORKLOAD, TokenSize, Workload, load_workload, parse_workload

# Chat-template tokens when no server measured them: a few per message for role markers and
# separators, and a short header (Llama 3 / Qwen / Kimi templates add 3-8 per message).
TEMPLATE_HEAD_TOKENS = 8
TEMPLATE_MESSAGE_TOKENS = 5


@dataclass(frozen=True)
class AgentStep:
    meta_tokens: int
    """This step's last user message (workflow metadata)."""
    adds_history_tokens: int
    """What this step adds to the history of later steps (the assistant action and tool result)."""
    output_tokens: int
    """max_tokens of the request (all generated with ignore_eos; an upper bound otherwise)."""
    prompt_tokens: int | None = None
    """Measured through the server's chat template, when the request set has it."""


@dataclass(frozen=True)
class SessionShape:
    system_own_tokens: int
    """The part of the system prompt that differs between sessions (1 - prefix_reuse)."""
    task_tokens: int
    steps: tuple[AgentStep, ...]


@dataclass(frozen=True)
class Traffic:
    name: str
    source: str
    system_shared_tokens: int
    tools_tokens: int
    template_head_tokens: int
    template_message_tokens: int
    sessions: tuple[SessionShape, ...]
    ignore_eos: bool
    notes: tuple[str, ...] = ()

    def steps_per_session(self) -> int:
        return min(len(s.steps) for s in self.sessions)


def draw(size: TokenSize, rng: random.Random) -> int:
    return rng.randint(size[0], size[1]) if isinstance(size, list) else size


def load_traffic(path: str | None) -> Traffic:
    """A request set is used as measured; a workload YAML (or the default workload) is drawn."""
    if path is None:
        return from_workload(parse_workload(DEFAULT_WORKLOAD), "built-in default workload")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such workload or request set file", hint="see examples/workload-agent.yaml")
    if is_request_set(p):
        return from_request_set(read_request_set(p), str(p))
    return from_workload(load_workload(p), str(p))


def from_workload(wl: Workload, source: str) -> Traffic:
    rng = random.Random(f"{wl.seed}:agent")  # drawn once, like the system prompt and tools of materialise
    tools = sum(draw(wl.tools.schema_tokens, rng) for _ in range(wl.tools.count))
    system = draw(wl.system_instruction_tokens, rng) + draw(wl.format_rules_tokens, rng)
    shared = round(wl.prefix_reuse * system)
    sessions = tuple(_drawn_session(wl, i, system - shared) for i in range(wl.sessions))
    note = (
        f"sizes drawn from {source} (seed {wl.seed}) in tokens, chat template approximated as "
        f"{TEMPLATE_HEAD_TOKENS} + {TEMPLATE_MESSAGE_TOKENS} per message; pass a run's request-set.jsonl for "
        "sizes measured by the server's tokenizer"
    )
    return Traffic(
        wl.name, source, shared, tools, TEMPLATE_HEAD_TOKENS, TEMPLATE_MESSAGE_TOKENS, sessions, wl.ignore_eos, (note,)
    )


def _drawn_session(wl: Workload, index: int, own: int) -> SessionShape:
    rng = random.Random(f"{wl.seed}:forecast:session:{index}")
    task = draw(wl.user_task_tokens, rng)
    steps = []
    for _ in range(wl.steps):
        added = draw(wl.history.assistant_action_tokens, rng) + draw(wl.history.tool_result_tokens, rng)
        steps.append(AgentStep(draw(wl.workflow_metadata_tokens, rng), added, draw(wl.output_tokens, rng)))
    return SessionShape(own, task, tuple(steps))


def from_request_set(rs: RequestSet, source: str) -> Traffic:
    sessions = rs.sessions()
    if not sessions:
        raise InputError(f"{source}: the request set has no agent sessions", hint="materialise a workload with steps")
    workload = rs.header.get("workload") or {}
    reuse = _number(workload.get("prefix_reuse"), 1.0) if isinstance(workload, dict) else 1.0
    first = sessions[0][0].sizes
    system = int(first.get("system_instruction", 0)) + int(first.get("format_rules", 0))
    shared = round(reuse * system)
    head, per_message = _template_fit(sessions)
    shapes = tuple(_measured_session(s, system - shared) for s in sessions)
    ignore_eos = all(bool(r.body.get("ignore_eos")) for s in sessions for r in s)
    name = str(workload.get("name", rs.id)) if isinstance(workload, dict) else rs.id
    note = f"sizes from request set {rs.id} ({rs.header.get('tokenizer') or 'tokenizer unknown'})"
    return Traffic(name, source, shared, int(first.get("tools", 0)), head, per_message, shapes, ignore_eos, (note,))


def _measured_session(steps: list[SetRequest], own: int) -> SessionShape:
    out = []
    for k, req in enumerate(steps):
        nxt = steps[k + 1].sizes.get("history", 0) if k + 1 < len(steps) else req.sizes.get("history", 0)
        added = max(0, int(nxt) - int(req.sizes.get("history", 0)))
        prompt = req.sizes.get("prompt_tokens")
        out.append(
            AgentStep(
                int(req.sizes.get("workflow_metadata", 0)),
                added,
                int(_number(req.body.get("max_tokens"), 0)),
                int(prompt) if prompt is not None else None,
            )
        )
    return SessionShape(own, int(steps[0].sizes.get("user_task", 0)), tuple(out))


def _number(value: Json, default: float) -> float:
    """A number of a request set's JSON (header or body), else the default."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _template_fit(sessions: list[list[SetRequest]]) -> tuple[int, int]:
    """Chat-template tokens as head + per-message, fitted (least squares) to the measured prompts:
    what prompt_tokens has beyond the parts' own sizes."""
    xs: list[float] = []
    ys: list[float] = []
    for steps in sessions:
        for k, req in enumerate(steps):
            z = req.sizes
            if z.get("prompt_tokens") is None:
                continue
            parts = sum(int(z.get(n, 0)) for n in _PARTS)
            xs.append(3 + 2 * k)  # system, task, two messages per earlier step, the last user message
            ys.append(int(z["prompt_tokens"]) - parts)
    if not xs:
        return TEMPLATE_HEAD_TOKENS, TEMPLATE_MESSAGE_TOKENS
    slope, intercept = _line(xs, ys)
    return max(0, round(intercept)), max(0, round(slope))


_PARTS = ("system_instruction", "format_rules", "tools", "user_task", "history", "workflow_metadata")


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return slope, my - slope * mx
