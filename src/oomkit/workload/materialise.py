"""Workload spec -> request set. Seeded: the same spec and tokenizer give the same requests.

Each request of step k of session i is: a system message (instruction + format rules, the first
`prefix_reuse` share identical in every session), the tool definitions, the user's task, the
history of steps 0..k-1 (an assistant action with its tool call, and the tool's result), and a
last user message with workflow metadata. History is synthetic, not the model's output, so the
requests do not depend on what a model answers and can be replayed unchanged.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from oomkit import __version__
from oomkit.serial import Json, JsonObject
from oomkit.workload.requestset import RequestSet, SetRequest, body_id
from oomkit.workload.spec import TokenSize, Workload
from oomkit.workload.text import fit, text_of, tool_definition, words
from oomkit.workload.tokens import TokenCounter

SHORT_PROMPT = "Reply with one short sentence: are you ready?"
SHORT_MAX_TOKENS = 32
TOOL_MAX_TOKENS = 256


def draw(size: TokenSize, rng: random.Random) -> int:
    return rng.randint(size[0], size[1]) if isinstance(size, list) else size


class _Builder:
    def __init__(self, wl: Workload, counter: TokenCounter):
        self.wl, self.counter = wl, counter
        rng = random.Random(f"{wl.seed}:agent")
        self.tools = [
            tool_definition(
                i, rng, draw(wl.tools.schema_tokens, rng), list(wl.tools.parameter_types), wl.tools.strict, counter
            )
            for i in range(wl.tools.count)
        ]
        self.tools_json: list[Json] = [t.to_json() for t in self.tools]  # what every request carries
        self.sys_tokens = draw(wl.system_instruction_tokens, rng)
        self.rules_tokens = draw(wl.format_rules_tokens, rng)
        self.sys_pool = words(rng, max(1, self.sys_tokens) * 3)
        self.rules_pool = words(rng, max(1, self.rules_tokens) * 3)

    def system(self, session: int) -> tuple[str, dict[str, int]]:
        sys_text = fit(self.sys_pool, self.sys_tokens, self.counter, "You are an agent. ")
        rules = fit(self.rules_pool, self.rules_tokens, self.counter, "Format rules: ")
        full = f"{sys_text}\n\n{rules}"
        shared = round(self.wl.prefix_reuse * len(full))
        if shared < len(full):
            # Keep the shared characters, then a session-specific tail of the same length in words.
            rng = random.Random(f"{self.wl.seed}:system:{session}")
            tail = " ".join(words(rng, len(full)))[: len(full) - shared]
            full = full[:shared] + tail
        return full, {"system_instruction": self.counter.count(sys_text), "format_rules": self.counter.count(rules)}

    def history(self, session: int, step: int, rng: random.Random) -> tuple[list[Json], int]:
        msgs: list[Json] = []
        tokens = 0
        for j in range(step):
            action = text_of(rng, draw(self.wl.history.assistant_action_tokens, rng), self.counter)
            result = text_of(rng, draw(self.wl.history.tool_result_tokens, rng), self.counter, "Result: ")
            tokens += self.counter.count(action) + self.counter.count(result)
            if self.tools:
                tool = self.tools[(session + j) % len(self.tools)]
                call_id = f"call_{session}_{j}"
                args = json.dumps(tool.valid_arguments(rng))
                call: JsonObject = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool.name, "arguments": args},
                }
                msgs += [
                    {"role": "assistant", "content": action, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call_id, "content": result},
                ]
            else:
                msgs += [{"role": "assistant", "content": action}, {"role": "user", "content": result}]
        return msgs, tokens

    def tool_choice(self, session: int, step: int) -> Json:
        choice = self.wl.tools.choice
        if not self.tools:
            return None
        if choice == "named":
            name = self.tools[(session + step) % len(self.tools)].name
            return {"type": "function", "function": {"name": name}}
        return choice

    def sampling(self, rng: random.Random) -> JsonObject:
        body: JsonObject = {
            "max_tokens": draw(self.wl.output_tokens, rng),
            "temperature": self.wl.temperature,
            "seed": rng.randint(0, 2**31 - 1),
        }
        if self.wl.ignore_eos:
            body["ignore_eos"] = True
        return body

    def agent(self, session: int, step: int) -> SetRequest:
        rng = random.Random(f"{self.wl.seed}:session:{session}")
        system, sizes = self.system(session)
        task = text_of(rng, draw(self.wl.user_task_tokens, rng), self.counter, "Task: ")
        history, hist_tokens = self.history(session, step, rng)
        rng_step = random.Random(f"{self.wl.seed}:session:{session}:step:{step}")
        meta = text_of(
            rng_step,
            draw(self.wl.workflow_metadata_tokens, rng_step),
            self.counter,
            f"[workflow] session {session} step {step + 1}/{self.wl.steps} ",
        )
        messages: list[Json] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task},
            *history,
            {"role": "user", "content": meta},
        ]
        body: JsonObject = {"messages": messages, **self.sampling(rng_step)}
        if self.tools:
            body["tools"] = self.tools_json
            body["tool_choice"] = self.tool_choice(session, step)
        tools = sum(self.counter.count(json.dumps(t)) for t in self.tools_json)
        sizes.update(
            user_task=self.counter.count(task),
            history=hist_tokens,
            workflow_metadata=self.counter.count(meta),
            tools=tools,
        )
        return self.finish("agent", session, step, body, sizes)

    def finish(
        self, kind: str, session: int | None, step: int | None, body: JsonObject, sizes: dict[str, int]
    ) -> SetRequest:
        prompt = self.counter.count_chat(body)
        if prompt is not None:
            sizes["prompt_tokens"] = prompt
        return SetRequest(body_id(body), kind, session, step, body, sizes)

    def probes(self) -> list[SetRequest]:
        short: JsonObject = {
            "messages": [{"role": "user", "content": SHORT_PROMPT}],
            "max_tokens": SHORT_MAX_TOKENS,
            "temperature": 0.0,
            "seed": self.wl.seed,
        }
        out = [self.finish("short", None, None, short, {})]
        if self.tools:
            name = self.tools[0].name
            system, sizes = self.system(0)
            body: JsonObject = {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Call the tool {name} now."},
                ],
                "tools": self.tools_json,
                "tool_choice": {"type": "function", "function": {"name": name}},
                "max_tokens": TOOL_MAX_TOKENS,
                "temperature": self.wl.temperature,
                "seed": self.wl.seed,
            }
            out.append(self.finish("tool", None, None, body, sizes))
        return out


def materialise(wl: Workload, counter: TokenCounter, tokenizer_note: str | None = None) -> RequestSet:
    b = _Builder(wl, counter)
    requests = b.probes() + [b.agent(s, k) for s in range(wl.sessions) for k in range(wl.steps)]
    header: JsonObject = {
        "workload": wl.model_dump(mode="json"),
        "tokenizer": counter.source,
        "tokenizer_note": tokenizer_note,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "oomkit_version": __version__,
    }
    return RequestSet.build(header, requests)
