"""The ladder on the small-KV testbed profile (max_model_len 1024) with a workload whose later
agent steps are longer than the context: the request set is fitted with the REAL server's
tokenizer and template, no request but the history doubling's meets a 400, and the ladder does
not stop at tool_call. One vLLM start, taken under /tmp/oomkit-vllm.lock by the test itself."""

from __future__ import annotations

import fcntl
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from oomkit.cli import main
from oomkit.fsio import read_jsonl
from oomkit.workload import read_request_set

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]
REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "examples" / "testbed-small-kv.yaml"
LOCK = "/tmp/oomkit-vllm.lock"


def test_ladder_fits_the_set_to_the_testbed_and_runs_every_step(tmp_path, capsys):
    wl = yaml.safe_load((REPO / "examples" / "workload-testbed.yaml").read_text())
    wl.update(name="testbed-long", sessions=2, steps=6)  # steps 4-5 need more than 1,024 tokens
    workload = tmp_path / "long.yaml"
    workload.write_text(yaml.safe_dump(wl))
    argv = ["ladder", "--profile", str(PROFILE), "--workload", str(workload), "--runs-dir", str(tmp_path / "runs")]
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one vLLM server at a time on this machine
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--max-concurrency", "2", "--json"])
    assert exit_.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["stopped_at"] is None and result["failure"] is None
    assert [s["name"] for s in result["steps"]][:2] == ["short_request", "tool_call"] and result["steps"][1]["ok"]
    assert all(s["phase"] != "not_oom_other" for s in result["steps"])
    note = next(n for n in result["notes"] if n.startswith("fitted to max_model_len 1024: "))
    assert note.endswith("requests trimmed (history), see fit.json")
    run = Path(result["run_dir"])
    fit = json.loads((run / "fit.json").read_text())
    assert fit["source"] == "GET /v1/models" and fit["trimmed"]
    assert all(t["tokens_after"] <= 1024 < t["tokens_before"] for t in fit["trimmed"])
    sent = read_request_set(run / "request-set.jsonl")
    assert sent.id == fit["request_set"] and sent.header["tokenizer"].startswith("server /tokenize")
    records = read_jsonl(run / "requests.jsonl")
    too_long = [r["label"] for r in records if r["error_kind"] == "context_length"]
    assert all(label.startswith("history_x") for label in too_long), too_long
    agent = [r for r in records if r["label"] == "agent_steps"]
    assert len(agent) == 6 and all(r["ok"] for r in agent)  # the trimmed steps 4-5 answered
