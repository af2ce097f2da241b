"""Tool calls validated the way an agent depends on them: the arguments must parse as JSON and
validate against the tool's JSON Schema (shared/research/vllm-internals.md §7, validation recipe)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from oomkit.client.records import ToolCall, ToolCheck
from oomkit.errors import MissingDependency
from oomkit.serial import Json, JsonObject

# Text that shows a tool call the server's parser did not turn into `tool_calls`.
MARKUP_IN_CONTENT = (
    ("<tool_call>", "hermes/Qwen format; cpu-testbed.md §7 shows it left in content"),
    ("<|tool_call", "Kimi K2 section markers; vllm-internals.md §7"),
    ("<|open|>call", "Kimi K3 call marker; the K3 recipe warns it may escape the parser"),
    ("[TOOL_CALLS]", "Mistral format"),
    ("<|python_tag|>", "Llama 3 JSON tool format"),
)


def _validator_for(schema_json: str) -> Any:
    try:
        import jsonschema
    except ImportError as err:
        raise MissingDependency("tool-call validation needs jsonschema", hint="pip install jsonschema") from err
    return _cached_validator(schema_json, jsonschema)


@lru_cache(maxsize=256)
def _cached_validator(schema_json: str, jsonschema: Any) -> Any:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def tool_schemas(tools: Json | None) -> dict[str, JsonObject]:
    """name -> parameters schema, from a request's OpenAI-style tool definitions."""
    out: dict[str, JsonObject] = {}
    for tool in tools if isinstance(tools, list) else []:
        fn = _object(tool.get("function")) if isinstance(tool, dict) else {}
        name, params = fn.get("name"), _object(fn.get("parameters"))
        if isinstance(name, str):
            out[name] = params or {"type": "object"}
    return out


def _object(value: Json | None) -> JsonObject:
    return value if isinstance(value, dict) else {}


def expects_call(tool_choice: Json | None) -> str | bool:
    """True when a call is required, the tool's name when one is named, False otherwise."""
    if isinstance(tool_choice, dict):
        return str(_object(tool_choice.get("function")).get("name") or True)
    return tool_choice == "required"


def check_tool_calls(
    calls: tuple[ToolCall, ...],
    tools: Json | None,
    tool_choice: Json | None,
    finish_reason: str | None,
    content: str,
) -> ToolCheck | None:
    """None when no tools were offered; otherwise every problem found, in a stable order."""
    if not tools:
        return None
    schemas = tool_schemas(tools)
    expected = expects_call(tool_choice)
    problems: list[str] = []
    if expected and not calls:
        problems.append("no tool call returned")
    if tool_choice == "none" and calls:
        problems.append("tool call returned although tool_choice was none")
    markup = [m for m, _ in MARKUP_IN_CONTENT if m in (content or "")]
    if markup:
        problems.append(f"tool-call markup {markup[0]!r} left in content (the server's parser missed it)")
    if finish_reason == "length" and (calls or expected):
        problems.append("cut by max_tokens (finish_reason length)")
    ids = [c.id for c in calls if c.id]
    if len(ids) != len(set(ids)):
        problems.append("duplicate tool call ids")
    for i, call in enumerate(calls):
        problems.extend(f"call {i}: {p}" for p in _check_one(call, schemas, expected))
    return ToolCheck(valid=not problems, problems=tuple(problems))


def _check_one(call: ToolCall, schemas: dict[str, JsonObject], expected: str | bool) -> list[str]:
    if call.name not in schemas:
        return [f"unknown tool {call.name!r}"]
    if isinstance(expected, str) and call.name != expected:
        return [f"called {call.name!r} but {expected!r} was named"]
    try:
        args = json.loads(call.arguments) if call.arguments else None
    except (json.JSONDecodeError, RecursionError) as err:
        return [f"arguments are not JSON ({err.msg if hasattr(err, 'msg') else err}): {call.arguments[:60]!r}"]
    validator = _validator_for(json.dumps(schemas[call.name], sort_keys=True))
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "arguments"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return [f"{where}: {first.message[:120]}{more}"]
    return []
