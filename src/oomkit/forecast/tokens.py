"""Token ids for the forecast's requests, laid out as a chat template lays out an agent step:
template head, system prompt (its shared part first), tools, the user's task, each earlier step's
action and tool result, this step's metadata. Every part's ids are a pure function of what the
part is (shared prompt, session i's task, session i's step j result), so what is shared on a real
server is the same id sequence here, and vLLM's block hashes meet exactly where a server's would."""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field

from oomkit.forecast.traffic import SessionShape, Traffic

TOKEN_ID_BASE = 64
"""Ids start above the range tokenizers keep for special tokens."""
_VOCAB = list(range(TOKEN_ID_BASE, TOKEN_ID_BASE + (1 << 16)))
"""One int object per id, shared by every list: a 64k-token prompt costs 8 bytes a token, not 36."""
OUTPUT_TOKEN_ID = TOKEN_ID_BASE + (1 << 16)
"""What the synthetic executor samples: one id outside the prompt range, never a stop token."""


def part_codes(key: str, n: int) -> array[int]:
    """n pseudo-random 16-bit codes from a part's name: equal names give equal codes, run after run."""
    if n <= 0:
        return array("H")
    return array("H", random.Random(key).getrandbits(16 * n).to_bytes(2 * n, "little"))


def ids_of(codes: array[int]) -> list[int]:
    return list(map(_VOCAB.__getitem__, codes))


@dataclass
class SessionTokens:
    """The growing prompt of one session: built once per step, extended step by step."""

    traffic: Traffic
    index: int
    shared_head: array[int]
    history: array[int] = field(default_factory=lambda: array("H"))
    """Codes, 2 bytes a token: 1,000 live sessions of 64k tokens stay at 128 MB here."""
    steps_added: int = 0
    base_tokens: int = 0
    """Where the history after the task starts (template head, system prompt, tools, task before it)."""
    last_ids: list[int] = field(default_factory=list)
    """The last prompt's ids: the next prompt starts with the same history, so its ids are copied
    from here instead of mapped again (mapping every id of every prompt took 5.9 s of a profiled
    150-session TP8 forecast; a list copy is about ten times cheaper per id). It is the list vLLM's
    Request holds as prompt_token_ids while that request lives, so it costs no memory then."""
    last_ids_history: int = 0
    """How many leading ids of last_ids are history tokens (history only grows at its end)."""

    @property
    def shape(self) -> SessionShape:
        return self.traffic.sessions[self.index]

    def prompt(self, step: int) -> list[int]:
        """The prompt of agent step `step` (steps are asked for in order)."""
        self._grow_to(step)
        t, shape = self.traffic, self.shape
        codes = self.history + part_codes(
            f"s{self.index}:meta{step}", t.template_message_tokens + shape.steps[step].meta_tokens
        )
        measured = shape.steps[step].prompt_tokens
        if measured is not None:  # the server's own count: the rest of the template goes last
            codes = codes[:measured] + part_codes(f"s{self.index}:tail{step}", measured - len(codes))
        return self._ids(codes)

    def release(self) -> None:
        """The session has sent its last request: its history and ids are no longer needed here (a
        later prompt() would build them again)."""
        self.history, self.steps_added, self.last_ids, self.last_ids_history = array("H"), 0, [], 0

    def _ids(self, codes: array[int]) -> list[int]:
        """ids_of(codes), whose first `reused` codes are history codes the last prompt had too."""
        reused = min(self.last_ids_history, len(codes))
        ids = self.last_ids[:reused] + ids_of(codes[reused:])
        self.last_ids, self.last_ids_history = ids, min(len(self.history), len(codes))
        return ids

    def scaled_prompt(self, step: int, factor: int) -> list[int]:
        """The ladder's history doubling of agent step `step` (oomkit.loadrun.history.scaled): its
        history after the task sent `factor` times. The copies after the first get ids of their own:
        block hashes are chained, so nothing after the first copy can hit a cached block anyway."""
        prompt = self.prompt(step)
        end = len(self.history)
        extra = (factor - 1) * (end - self.base_tokens)
        if extra <= 0:
            return prompt
        return prompt[:end] + ids_of(part_codes(f"s{self.index}:step{step}:x{factor}", extra)) + prompt[end:]

    def _grow_to(self, step: int) -> None:
        t, shape = self.traffic, self.shape
        if not self.history:
            own = part_codes(f"s{self.index}:system", shape.system_own_tokens)
            task = part_codes(f"s{self.index}:task", t.template_message_tokens + shape.task_tokens)
            self.history = self.shared_head + own + task
            self.base_tokens = len(self.history)
        while self.steps_added < step:
            j = self.steps_added
            added = 2 * t.template_message_tokens + shape.steps[j].adds_history_tokens
            self.history += part_codes(f"s{self.index}:step{j}", added)
            self.steps_added += 1


def shared_head(traffic: Traffic) -> array[int]:
    """Template header, the system prompt's shared part and the tools: identical in every session."""
    t = traffic
    head = part_codes("template", t.template_head_tokens + t.template_message_tokens)
    return head + part_codes("system", t.system_shared_tokens) + part_codes("tools", t.tools_tokens)


def session_tokens(traffic: Traffic, index: int, head: array[int]) -> SessionTokens:
    return SessionTokens(traffic, index % len(traffic.sessions), head)
