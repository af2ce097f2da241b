"""The ladder and the bench against a REAL vLLM CPU server (the small-KV testbed, `--url`):
preemptions seen in /metrics give the knee, a named strict tool validates even from a random
model, the temperature-0 repeat is identical, the context limit is found, sizes come from the
server's /tokenize. One server for the whole module; run under the shared lock:
    flock /tmp/oomkit-vllm.lock .venv/bin/python -m pytest tests/test_ladder_server.py -q
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
from _load_vllm import vllm_server

from oomkit.bench import BenchOptions, bench
from oomkit.client import ChatClient, ChatRequest, ClientOptions
from oomkit.fsio import read_jsonl
from oomkit.ladder import LadderOptions, ladder
from oomkit.loadrun.prepare import TargetSpec
from oomkit.workload import read_request_set

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]
WORKLOAD = str(Path(__file__).resolve().parent.parent / "examples" / "workload-testbed.yaml")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with vllm_server(tmp_path_factory.mktemp("vllm")) as s:
        yield s


@pytest.fixture(scope="module")
def result(server, tmp_path_factory):
    spec = TargetSpec(url=server.url, runs_dir=str(tmp_path_factory.mktemp("runs")))
    return ladder(spec, WORKLOAD, LadderOptions(max_concurrency=16, agent_steps=2))


def step(result, name):
    return next(s for s in result.steps if s.name == name)


def test_every_step_ran_without_failure(result):
    assert [s.name for s in result.steps] == [
        "short_request",
        "tool_call",
        "agent_steps",
        "history_doubling",
        "concurrency",
        "repeat",
    ]
    assert result.failure is None and result.stopped_at is None


def test_knee_is_where_preemptions_start(result, server):
    conc = step(result, "concurrency")
    assert result.knee.reason == "preemption" and 2 <= result.knee.concurrency <= 16
    rungs = conc.detail["rungs"]
    bad = [r for r in rungs if r["verdict"] == "preemption"]
    assert bad and all(r["detail"]["preemptions"] > 0 for r in bad)
    assert all(not r["detail"]["preemptions"] for r in rungs if r["verdict"] == "ok")
    assert all(r["concurrency"] >= result.knee.concurrency for r in bad)
    # V1 prints no preemption line (cpu-testbed.md §4): the metrics are the only evidence.
    assert "preempt" not in server.log.read_text(errors="replace").lower()
    metrics = read_jsonl(result.run_dir / "metrics.jsonl")
    assert any(
        any(k.startswith("vllm:num_preemptions_total") and v > 0 for k, v in m["samples"].items()) for m in metrics
    )


def test_named_strict_tool_is_schema_valid_from_a_random_model(result):
    tool = step(result, "tool_call")
    assert tool.ok and tool.detail["strict"] and tool.detail["valid"]
    assert tool.detail["calls"][0]["id"].startswith("chatcmpl-tool-")


def test_repeat_at_temperature_zero_is_identical(result):
    rep = step(result, "repeat")
    assert rep.ok and rep.detail["compared"] == 4 and not rep.detail["mismatches"]
    assert result.poc["repeat_run_identical"] and result.poc["short_request_stable"]


def test_context_limit_and_memory_recorded(result):
    assert result.poc["context_limit_found"] and result.poc["context_limit_tokens"] == 1024
    # The tiny server's process tree holds about 1.9 GiB RSS (cpu-testbed.md §10).
    assert result.poc["peak_memory_recorded"] and result.poc["peak_memory_bytes"] > 1 << 30
    assert json.loads((result.run_dir / "poc.json").read_text()) == result.poc


def test_sizes_are_measured_with_the_servers_tokenizer(result):
    rs = read_request_set(result.run_dir / "request-set.jsonl")
    assert rs.header["tokenizer"].startswith("server /tokenize")
    by_id = {r.id: r for r in rs.requests}
    sent = [r for r in read_jsonl(result.run_dir / "requests.jsonl") if r["ok"] and r["request_id"] in by_id]
    assert sent and all(r["prompt_tokens"] == by_id[r["request_id"]].sizes["prompt_tokens"] for r in sent)


def test_non_strict_tool_calls_are_validated_and_reported(server):
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["city", "unit"],
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
            },
        },
    }
    body = {
        "messages": [{"role": "user", "content": "weather in Paris"}],
        "tools": [weather],
        "max_tokens": 64,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 1.0,
    }

    async def go():
        async with ChatClient(server.url, "tiny", options=ClientOptions(timeout_s=120)) as c:
            return [await c.chat(ChatRequest(f"s{seed}", {**body, "seed": seed})) for seed in range(3)]

    for rec in asyncio.run(go()):
        assert rec.ok and rec.tool_check is not None
        try:
            args = json.loads(rec.tool_calls[0].arguments)
            jsonschema.validate(args, weather["function"]["parameters"])
            really_valid = rec.finish_reason != "length"
        except (IndexError, ValueError, jsonschema.ValidationError):
            really_valid = False
        assert rec.tool_check.valid is really_valid, (rec.tool_calls, rec.tool_check)
        assert rec.tool_check.valid or rec.tool_check.problems


def test_bench_against_the_same_server(server, tmp_path):
    r = bench(
        TargetSpec(url=server.url, runs_dir=str(tmp_path)),
        WORKLOAD,
        BenchOptions(concurrency=4, sessions=4, slos={"ttft_ms": 60_000}),
    )
    assert r.client.requests == 12 and r.client.errors == 0 and r.agents.success_share == 1.0
    # Every session shares the system prompt and tools: the server's own counters show the reuse.
    assert r.server.prefix_cache_hit_rate > 0.5 and r.client.cached_tokens > 0
    assert r.server.generation_tokens == r.client.output_tokens == 12 * 96
    assert r.server.requests_by_finish_reason == {"length": 12} and r.client.slo_attainment == 1.0
    assert r.peak_memory_bytes > 1 << 30 and r.memory_source.startswith("RSS")
