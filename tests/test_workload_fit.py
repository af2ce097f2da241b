"""Fitting a request set to the server's max_model_len (oomkit.workload.fit): history trimmed a
turn at a time, oldest first; a request that cannot fit refused with its numbers; nothing done
when it fits or the limit is unknown. Then through ladder and bench against the local
OpenAI-style server (tests/_load_fake_server.py): a set that does not fit is refused before any
request, a trimmed set is sent without a 400, and a 400 for length is never a failure phase."""

from __future__ import annotations

import json

import pytest
from _load_fake_server import FakeOpenAI

from oomkit.bench import BenchOptions, bench
from oomkit.cli import main
from oomkit.client.probe import ServerInfo
from oomkit.client.records import RequestRecord
from oomkit.fsio import read_jsonl
from oomkit.ladder import LadderOptions, ladder
from oomkit.loadrun.failure import PHASE_BY_ERROR, classify
from oomkit.loadrun.prepare import TargetSpec
from oomkit.loadrun.target import Target
from oomkit.workload import ApproxCounter, RequestSet, SetRequest, materialise, parse_workload, read_request_set
from oomkit.workload.fit import (
    TEMPLATE_TOKENS_PER_MESSAGE,
    TEMPLATE_TOKENS_WITH_TOOLS,
    DoesNotFit,
    fit_request_set,
    max_tokens_of,
    prompt_tokens_estimate,
    split_turns,
)
from oomkit.workload.requestset import body_id

LONG = {
    "name": "long-history",
    "sessions": 2,
    "steps": 8,
    "system_instruction_tokens": 150,
    "format_rules_tokens": 30,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 64,
    "tools": {"count": 2, "schema_tokens": 40, "strict": True, "choice": "required", "parameter_types": ["integer"]},
    "history": {"assistant_action_tokens": 15, "tool_result_tokens": 60},
}


def long_set(**changes) -> RequestSet:
    return materialise(parse_workload({**LONG, **changes}), ApproxCounter())


def need(req: SetRequest) -> int:
    return prompt_tokens_estimate(req) + max_tokens_of(req)


def request(messages, sizes, max_tokens=128, kind="agent", tools=None) -> SetRequest:
    body = {"messages": messages, "max_tokens": max_tokens, **({"tools": tools} if tools else {})}
    return SetRequest(body_id(body), kind, 0 if kind == "agent" else None, 0 if kind == "agent" else None, body, sizes)


def turn(i: int) -> list[dict]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": f"action {i} " + "x" * 400, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i} " + "y" * 400},
    ]


# -- the library ------------------------------------------------------------------------------


def test_a_set_that_fits_is_left_alone():
    rs = long_set()
    fitted, report = fit_request_set(rs, 100_000)
    assert fitted is rs and report.trimmed == () and report.note() is None
    assert report.to_dict()["fitted"] is True and report.requests == len(rs.requests)


def test_unknown_limit_fits_nothing_and_says_so():
    rs = long_set()
    fitted, report = fit_request_set(rs, None)
    assert fitted is rs and report.max_model_len is None and report.to_dict()["fitted"] is False
    assert report.note() == "max_model_len unknown (the server does not report it): the request set was not fitted"


def test_history_is_trimmed_oldest_turn_first_to_fit():
    rs = long_set()
    limit = need(rs.sessions()[0][4]) + 5  # steps 0-4 fit as they are, steps 5-7 must lose history
    fitted, report = fit_request_set(rs, limit)
    assert fitted.id != rs.id and report.set_id_after == fitted.id and fitted.header["fitted"]["trimmed"] == 6
    assert {(t.session, t.step) for t in report.trimmed} == {(s, k) for s in (0, 1) for k in (5, 6, 7)}
    assert all(need(r) <= limit for r in fitted.requests)
    assert report.note() == f"fitted to max_model_len {limit}: 6 requests trimmed (history)"
    before = {r.id: r for r in rs.requests}
    for t in report.trimmed:
        assert t.tokens_after <= limit < t.tokens_before and t.messages_dropped == 2 * t.turns_dropped >= 2
    untouched = [r for r in fitted.requests if r.id in before]
    assert len(untouched) == len(rs.requests) - 6  # the probes and steps 0-4 are sent unchanged
    last = fitted.sessions()[0][-1]
    original = rs.sessions()[0][-1]
    head, turns, tail = split_turns(last.body["messages"])
    o_head, o_turns, o_tail = split_turns(original.body["messages"])
    assert head == o_head and tail == o_tail and turns == o_turns[-len(turns) :]  # the newest turns are kept
    assert "prompt_tokens" not in last.sizes and last.sizes["history_turns_dropped"] == len(o_turns) - len(turns)


def test_a_trimmed_set_is_a_valid_set_and_fits_again_unchanged(tmp_path):
    rs = long_set()
    fitted, _ = fit_request_set(rs, need(rs.sessions()[0][3]))
    fitted.write(tmp_path / "rs.jsonl")
    again = read_request_set(tmp_path / "rs.jsonl")
    assert again.id == fitted.id
    refit, report = fit_request_set(again, need(rs.sessions()[0][3]))
    assert refit is again and report.trimmed == ()


def test_tool_calls_keep_their_results():
    req = request(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
            *turn(0),
            *turn(1),
            {"role": "user", "content": "now"},
        ],
        {"prompt_tokens": 500, "history": 400},
    )
    fitted, report = fit_request_set(RequestSet.build({}, [req]), 128 + 400)
    messages = fitted.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[2]["tool_calls"][0]["id"] == messages[3]["tool_call_id"] == "call_1"
    assert report.trimmed[0].turns_dropped == 1


def test_refused_with_the_request_and_by_how_much():
    probe = request(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "call"}],
        {"prompt_tokens": 900},
        max_tokens=256,
        kind="tool",
    )
    with pytest.raises(DoesNotFit) as err:
        fit_request_set(RequestSet.build({}, [probe]), 1024)
    assert err.value.message == (
        f"request {probe.id} (tool probe) needs 1156 tokens (prompt ~900 + max_tokens 256), "
        "the server's max_model_len is 1024: over by 132 tokens"
    )
    assert "--max-model-len" in err.value.hint and err.value.exit_code == 2
    assert err.value.to_dict()["refused"][0]["over_tokens"] == 132


def test_refused_when_even_no_history_is_too_long():
    # 1000 measured tokens, one turn whose text is the whole 300-token history: 700 + 128 > 800.
    req = request(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "a" * 600},
            {"role": "user", "content": "r" * 600},
            {"role": "user", "content": "now"},
        ],
        {"prompt_tokens": 1000, "history": 300},
    )
    ok = request([{"role": "user", "content": "hi"}], {"prompt_tokens": 10}, max_tokens=16, kind="short")
    with pytest.raises(DoesNotFit) as err:
        fit_request_set(RequestSet.build({}, [ok, req, req]), 800)
    assert err.value.message == (
        f"request {req.id} (agent session 0 step 0) needs 828 tokens (prompt ~700 + max_tokens 128), "
        "the server's max_model_len is 800: over by 28 tokens (and 1 more, up to 28 over)"
    )


def test_unmeasured_prompts_get_the_template_margin():
    tools = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    req = request(
        [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 40}],
        {"system_instruction": 100, "user_task": 10},
        tools=tools,
    )
    margin = 2 * TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS_WITH_TOOLS
    assert prompt_tokens_estimate(req) >= 110 + margin
    measured = request(req.body["messages"], {"prompt_tokens": 150}, tools=tools)
    assert prompt_tokens_estimate(measured) == 150  # the template is already in a measured size


# -- through ladder and bench -----------------------------------------------------------------


@pytest.fixture
def long_workload(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(json.dumps(LONG))  # JSON is YAML
    return str(path)


def chat_errors(run_dir) -> list[tuple[str, str]]:
    return [(r["label"], r["error_kind"]) for r in read_jsonl(run_dir / "requests.jsonl") if r["error_kind"]]


def test_a_set_that_cannot_fit_is_refused_before_any_request(tmp_path, capsys):
    with FakeOpenAI(max_model_len=1024) as fake:  # the built-in workload needs about 1,200 tokens
        with pytest.raises(SystemExit) as exit_:
            main(["ladder", "--url", fake.url, "--runs-dir", str(tmp_path)])
        sent = list(fake.requests)
    assert exit_.value.code == 2 and sent == []
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(tool probe) needs" in err and "max_model_len is 1024: over by" in err
    run = next(tmp_path.iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["state"] == "failed" and manifest["reason"] == "request_set_does_not_fit"
    fit = json.loads((run / "fit.json").read_text())
    assert fit["fitted"] is False and fit["refused"][0]["kind"] == "tool" and fit["source"] == "GET /v1/models"


def test_ladder_sends_the_trimmed_set_without_a_400(tmp_path, long_workload, capsys):
    runs = tmp_path / "runs"
    with FakeOpenAI(max_model_len=1000, kv_capacity=3) as fake:
        with pytest.raises(SystemExit) as exit_:
            args = ["ladder", "--url", fake.url, "--workload", long_workload, "--runs-dir", str(runs)]
            main([*args, "--max-concurrency", "2"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    fit_line = next(ln for ln in out.splitlines() if "fitted to" in ln)
    assert fit_line.startswith("note: fitted to max_model_len 1000: ") and fit_line.endswith(
        "requests trimmed (history), see fit.json"
    )
    run = next(runs.iterdir())
    fit = json.loads((run / "fit.json").read_text())
    assert fit["fitted"] and fit["trimmed"] and fit["request_set"] == read_request_set(run / "request-set.jsonl").id
    # Only the history doubling, which grows the history past the limit on purpose, meets a 400.
    assert chat_errors(run) and all(label.startswith("history_x") for label, _ in chat_errors(run))


def test_a_400_for_length_is_not_a_failure_phase():
    assert "context_length" not in PHASE_BY_ERROR
    target = Target("http://127.0.0.1:9", ServerInfo("http://127.0.0.1:9", "m", ("m",), 1024))
    too_long = RequestRecord("r1", "bench", 0, 0, 0, False, error_kind="context_length", http_status=400)
    timed_out = RequestRecord("r2", "bench", 0, 1, 0, False, error_kind="timeout")
    assert classify([too_long], target) is None
    assert classify([too_long, timed_out], target).kind == "timeout"  # the first real failure


def test_ladder_step_with_a_400_for_length_is_noted_not_failed(tmp_path, long_workload):
    # A server that does not report max_model_len: nothing is fitted, the long requests get a 400.
    with FakeOpenAI(max_model_len=700, report_max_model_len=False) as fake:
        spec = TargetSpec(url=fake.url, runs_dir=str(tmp_path))
        result = ladder(spec, long_workload, LadderOptions(max_concurrency=1))
    assert result.notes[0].startswith("max_model_len unknown") and result.stopped_at is None
    agent = next(s for s in result.steps if s.name == "agent_steps")
    assert not agent.ok and agent.failure is None and agent.phase == "healthy" and agent.errors == 1
    assert "longer than the server's context (HTTP 400 context_length)" in agent.notes[-1]
    assert all(s.phase != "not_oom_other" for s in result.steps)


def test_bench_fits_too_and_a_400_for_length_is_no_failure(tmp_path, long_workload):
    with FakeOpenAI(max_model_len=1000) as fake:
        fitted = bench(TargetSpec(url=fake.url, runs_dir=str(tmp_path)), long_workload, BenchOptions(2))
    assert fitted.client.errors == 0 and any("requests trimmed (history), see fit.json" in n for n in fitted.notes)
    assert (fitted.run_dir / "fit.json").is_file()
    with FakeOpenAI(max_model_len=700, report_max_model_len=False) as fake:
        unfitted = bench(TargetSpec(url=fake.url, runs_dir=str(tmp_path)), long_workload, BenchOptions(2))
    assert unfitted.client.errors_by_kind.get("context_length") and unfitted.failure is None
    assert json.loads((unfitted.run_dir / "manifest.json").read_text())["bench_outcome"]["failure"] is None
