"""Deterministic filler text of a given token size, and tool definitions of a given schema size."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace

from oomkit.serial import Json, JsonObject
from oomkit.workload.spec import ParamType
from oomkit.workload.tokens import TokenCounter

# Plain English words (our own list) plus the Greek letters the testbed tokenizer was trained on,
# so that filler tokenizes into whole words on most vocabularies.
WORDS = tuple(
    "the agent reads a file then runs the tests and reports which checks failed with the reason "
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
    "tau upsilon phi chi psi omega quick brown fox jumps over lazy dog service request user account "
    "order invoice payment shipping address customer ticket status error warning update record "
    "table column value number date time list item note summary result output input config option "
    "build deploy release branch commit review merge issue label owner team project plan step task "
    "search query index document page section title body link source target cache memory model".split()
)
TOOL_NAMES = (
    "search_docs",
    "read_file",
    "write_file",
    "run_tests",
    "list_dir",
    "http_get",
    "query_db",
    "create_ticket",
    "update_ticket",
    "send_message",
    "get_weather",
    "add",
    "calendar_lookup",
    "summarize",
    "translate",
    "fetch_metrics",
)
SIZE_TOLERANCE = 0.02
MAX_CORRECTIONS = 4


def words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def fit(pool: list[str], target_tokens: int, counter: TokenCounter, prefix: str = "") -> str:
    """The longest prefix of `pool` (joined by spaces) whose token count is closest to the target;
    a few secant corrections instead of a search keep /tokenize calls to 2-4 per piece."""
    if target_tokens <= 0:
        return prefix.rstrip()
    n = min(len(pool), max(1, target_tokens))
    best: tuple[int, str] | None = None
    for _ in range(MAX_CORRECTIONS):
        text = prefix + " ".join(pool[:n])
        got = counter.count(text)
        if best is None or abs(got - target_tokens) < best[0]:
            best = (abs(got - target_tokens), text)
        if abs(got - target_tokens) <= max(1, SIZE_TOLERANCE * target_tokens) or got == 0:
            break
        n = min(len(pool), max(1, round(n * target_tokens / got)))
    return best[1] if best else prefix


def text_of(rng: random.Random, tokens: int, counter: TokenCounter, prefix: str = "") -> str:
    """Fresh filler of about `tokens` tokens (3 words per token is more than any tokenizer needs)."""
    return fit(words(rng, max(1, tokens) * 3), tokens, counter, prefix)


@dataclass(frozen=True)
class Param:
    """One parameter of a synthetic tool: its type, and the values of an enum."""

    kind: ParamType
    choices: tuple[str, ...] = ()

    @classmethod
    def draw(cls, kind: ParamType, rng: random.Random) -> Param:
        if kind == "enum":
            return cls(kind, tuple(sorted(rng.sample(["low", "medium", "high", "urgent", "none"], 3))))
        return cls(kind)

    def schema(self) -> JsonObject:
        if self.kind == "enum":
            return {"type": "string", "enum": list(self.choices)}
        if self.kind == "string":
            return {"type": "string", "maxLength": 32}
        return {"type": self.kind}  # integer: no bounds, grammar backends do not all enforce them

    def value(self, rng: random.Random) -> Json:
        """A value that validates against `schema()` (for the synthetic history)."""
        if self.kind == "enum":
            return rng.choice(self.choices)
        if self.kind == "integer":
            return rng.randint(0, 10_000)
        if self.kind == "number":
            return round(rng.uniform(0, 100), 2)
        if self.kind == "boolean":
            return rng.random() < 0.5
        return " ".join(words(rng, 2))[:32]


@dataclass(frozen=True)
class Tool:
    """A synthetic OpenAI function tool; `to_json()` is what a request carries."""

    name: str
    description: str
    params: dict[str, Param]
    strict: bool

    def to_json(self) -> JsonObject:
        props: JsonObject = {key: p.schema() for key, p in self.params.items()}
        required: list[Json] = [*sorted(props)]
        params: JsonObject = {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }
        fn: JsonObject = {"name": self.name, "description": self.description, "parameters": params}
        if self.strict:
            fn["strict"] = True
        return {"type": "function", "function": fn}

    def valid_arguments(self, rng: random.Random) -> JsonObject:
        """Arguments that validate against the tool's schema (for the synthetic history)."""
        return {key: p.value(rng) for key, p in self.params.items()}


def tool_definition(
    index: int,
    rng: random.Random,
    schema_tokens: int,
    param_types: list[ParamType],
    strict: bool,
    counter: TokenCounter,
) -> Tool:
    """A tool whose JSON is about `schema_tokens` tokens: 1-6 parameters whose types cycle
    through `param_types`, and a description that takes the rest of the size."""
    base = TOOL_NAMES[index % len(TOOL_NAMES)]
    name = base if index < len(TOOL_NAMES) else f"{base}_{index // len(TOOL_NAMES)}"
    n_params = max(1, min(6, schema_tokens // 30))
    params = {f"p{i}_{rng.choice(WORDS)}": Param.draw(param_types[i % len(param_types)], rng) for i in range(n_params)}
    tool = Tool(name, "", params, strict)
    fixed = counter.count(json.dumps(tool.to_json()))
    pool = words(rng, max(1, schema_tokens) * 3)
    # The description's own tokens: whatever the fixed part leaves (at least one word).
    return replace(tool, description=fit(pool, max(1, schema_tokens - fixed), counter))
