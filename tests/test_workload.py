"""Workload spec (strict YAML), materialisation into a request set, and its file format."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from _load_fake_server import FakeOpenAI

from oomkit.errors import InputError
from oomkit.workload import (
    ApproxCounter,
    RequestSet,
    load_workload,
    materialise,
    parse_workload,
    read_request_set,
    server_counter,
)
from oomkit.workload.tokens import ServerCounter

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
SMALL = {
    "name": "t",
    "sessions": 3,
    "steps": 3,
    "system_instruction_tokens": 120,
    "format_rules_tokens": 30,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": [16, 32],
    "tools": {"count": 3, "schema_tokens": 50, "choice": "named", "strict": True},
    "history": {"assistant_action_tokens": 20, "tool_result_tokens": 60},
}


@pytest.mark.parametrize("name", ["workload-agent.yaml", "workload-testbed.yaml"])
def test_examples_are_valid(name):
    wl = load_workload(os.path.join(EXAMPLES, name))
    assert wl.sessions >= 1 and wl.steps >= 1


@pytest.mark.parametrize(
    "data,field,why",
    [
        ({"name": "x", "sessions": "3"}, "sessions", "valid integer"),
        ({"name": "x", "tools": {"count": 2, "shema_tokens": 5}}, "tools.shema_tokens", "Extra inputs"),
        ({"name": "x", "output_tokens": [50, 10]}, "output_tokens", "min <= max"),
        ({"name": "x", "prefix_reuse": 1.5}, "prefix_reuse", "less than or equal to 1"),
        ({"name": "x", "tools": {"choice": "sometimes"}}, "tools.choice", "auto"),
        ({"sessions": 2}, "name", "Field required"),
    ],
)
def test_invalid_workload_names_the_field_and_the_reason(data, field, why):
    with pytest.raises(InputError) as err:
        parse_workload(data, "w.yaml")
    assert f"w.yaml: field {field}" in err.value.message and why in err.value.message


def test_invalid_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_workload(bad)
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match="a YAML mapping"):
        load_workload(bad)
    with pytest.raises(InputError, match="no such workload"):
        load_workload(tmp_path / "missing.yaml")


def test_materialise_is_deterministic_and_shaped_like_an_agent():
    wl = parse_workload(SMALL)
    a, b = materialise(wl, ApproxCounter()), materialise(wl, ApproxCounter())
    assert a.id == b.id and [r.id for r in a.requests] == [r.id for r in b.requests]
    assert [r.kind for r in a.requests[:2]] == ["short", "tool"] and len(a.sessions()) == 3
    s0 = a.sessions()[0]
    assert [r.step for r in s0] == [0, 1, 2]
    # History grows by one action + result per step, and earlier steps are a prefix of later ones.
    assert [len(r.body["messages"]) for r in s0] == [3, 5, 7]
    assert s0[2].body["messages"][:4] == s0[1].body["messages"][:4]
    assert s0[1].body["messages"][2]["tool_calls"][0]["id"] == s0[1].body["messages"][3]["tool_call_id"]
    assert s0[0].body["tool_choice"]["type"] == "function" and s0[0].body["tools"][0]["function"]["strict"] is True
    assert 16 <= s0[0].body["max_tokens"] <= 32
    assert materialise(parse_workload({**SMALL, "seed": 1}), ApproxCounter()).id != a.id


def test_sizes_follow_the_spec():
    rs = materialise(parse_workload(SMALL), ApproxCounter())
    for r in rs.sessions()[1]:
        assert abs(r.sizes["system_instruction"] - 120) <= 3 and abs(r.sizes["user_task"] - 20) <= 2
    assert rs.sessions()[1][2].sizes["history"] == pytest.approx(2 * (20 + 60), rel=0.1)


def test_prefix_reuse_controls_the_shared_system_prompt():
    def shared(reuse: float) -> float:
        rs = materialise(parse_workload({**SMALL, "prefix_reuse": reuse}), ApproxCounter())
        a, b = (s[0].body["messages"][0]["content"] for s in rs.sessions()[:2])
        return len(os.path.commonprefix([a, b])) / len(a)

    assert shared(1.0) == 1.0 and 0.45 <= shared(0.5) <= 0.6 and shared(0.0) < 0.05


def test_request_set_round_trip_and_tamper_detection(tmp_path):
    rs = materialise(parse_workload(SMALL), ApproxCounter())
    path = rs.write(tmp_path / "set.jsonl")
    again = read_request_set(path)
    assert isinstance(again, RequestSet) and again.id == rs.id and again.requests == rs.requests
    lines = path.read_text().splitlines()
    edited = json.loads(lines[3])
    edited["body"]["max_tokens"] += 1
    path.write_text("\n".join(lines[:3] + [json.dumps(edited)] + lines[4:]) + "\n")
    with pytest.raises(InputError, match="was edited"):
        read_request_set(path)
    path.write_text(lines[0] + "\n" + "\n".join(lines[2:]) + "\n")  # a request removed
    with pytest.raises(InputError, match="does not match"):
        read_request_set(path)
    path.write_text('{"kind": "something else"}\n')
    with pytest.raises(InputError, match="not an oomkit request set"):
        read_request_set(path)


def test_server_tokenizer_is_used_when_available():
    with FakeOpenAI() as fake:
        counter, note = server_counter(fake.url, "fake-model")
        assert isinstance(counter, ServerCounter) and note is None
        rs = materialise(parse_workload(SMALL), counter, note)
        assert rs.header["tokenizer"].startswith("server /tokenize")
        assert all("prompt_tokens" in r.sizes for r in rs.requests)  # measured through the template
        fake.metrics_enabled = False
    counter, note = server_counter("http://127.0.0.1:9", "m")
    assert isinstance(counter, ApproxCounter) and "approximate" in note
    assert counter.count("abcdefgh") == 2 and counter.count_chat({"messages": []}) is None


def test_a_server_without_tokenize_falls_back():
    transport = httpx.MockTransport(lambda req: httpx.Response(404, json={"detail": "Not Found"}))
    counter = ServerCounter(httpx.Client(base_url="http://x", transport=transport), "m")
    with pytest.raises(httpx.HTTPStatusError):
        counter.count("hello")
