"""`oomkit compare` without vLLM: the one-factor rule, the retention checks made before any launch,
the noise-aware verdict, the client-side rewrites, and cells against a real local OpenAI-style server
(client-side modes: the same server for every cell)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from _load_fake_server import FakeOpenAI

from oomkit.cli import main
from oomkit.compare import CompareOptions, cache_vs_context, compare, judge, load_experiment, parse_experiment
from oomkit.compare.cells import Cell
from oomkit.compare.checks import check_plan, retention_layers
from oomkit.compare.clientside import cut_history
from oomkit.compare.document import CellDoc
from oomkit.compare.spec import plan_experiment
from oomkit.compare.verdict import BY_KEY
from oomkit.errors import InputError, UsageError
from oomkit.launch import load_profile
from oomkit.workload.requestset import SetRequest

REPO = Path(__file__).resolve().parent.parent
SMALL_KV = REPO / "examples" / "testbed-small-kv.yaml"
HYBRID = REPO / "examples" / "testbed-hybrid.yaml"
WL = {
    "name": "c",
    "sessions": 4,
    "steps": 3,
    "system_instruction_tokens": 200,
    "format_rules_tokens": 20,
    "user_task_tokens": 20,
    "workflow_metadata_tokens": 10,
    "output_tokens": 12,
    "tools": {"count": 0},
    "history": {"assistant_action_tokens": 10, "tool_result_tokens": 30},
}


def experiment(tmp_path: Path, variants: list, **extra) -> Path:
    wl = tmp_path / "wl.yaml"
    wl.write_text(yaml.safe_dump(WL))
    data = {
        "name": "t",
        "profile": str(SMALL_KV),
        "workload": str(wl),
        "concurrency": 2,
        "repeats": 2,
        "variants": variants,
        **extra,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def plan(tmp_path: Path, variants: list, profile: Path = SMALL_KV):
    spec = load_experiment(experiment(tmp_path, variants, profile=str(profile)))
    prof = load_profile(profile)
    return check_plan(plan_experiment(spec, dict(prof.args)), prof)


def test_a_two_factor_variant_is_refused_naming_both(tmp_path):
    with pytest.raises(InputError) as err:
        plan(tmp_path, [{"name": "both", "set": {"concurrency": 1, "max_num_seqs": 2}}])
    msg = err.value.one_line()
    assert "changes 2 factors (`concurrency` and `max_num_seqs`)" in msg and "split it" in msg


@pytest.mark.parametrize(
    "variant,text",
    [
        ({"name": "x", "set": {"max_num_seq": 4}}, "unknown factor `max_num_seq`"),
        ({"name": "x", "set": {"max_model_len": 1024}}, "the baseline's own value: it changes nothing"),
        ({"name": "x", "set": {"concurrency": "four"}}, "concurrency = 'four' is not a valid value"),
        ({"name": "x", "set": {}}, "changes 0 factors"),
    ],
)
def test_bad_variants(tmp_path, variant, text):
    with pytest.raises(InputError) as err:
        plan(tmp_path, [variant])
    assert text in err.value.one_line()


def test_experiment_file_errors_name_the_field():
    with pytest.raises(InputError, match="missing field `concurrency`"):
        parse_experiment({"name": "x", "profile": "p.yaml"})
    with pytest.raises(InputError, match="unknown field `repeat`"):
        parse_experiment({"name": "x", "profile": "p.yaml", "concurrency": 1, "repeat": 2})


def test_retention_on_a_pure_attention_model_is_refused_before_launch(tmp_path):
    assert retention_layers(load_profile(SMALL_KV))["layers"] == 0
    with pytest.raises(InputError) as err:
        plan(tmp_path, [{"name": "r", "set": {"prefix_cache_retention_interval": 512}}])
    msg = err.value.one_line()
    assert "vLLM startup error" in msg and "no sliding-window or Mamba KV cache group" in msg


def test_the_environment_variable_name_is_recognised_and_the_user_told(tmp_path):
    p = plan(tmp_path, [{"name": "r", "set": {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "None"}}], HYBRID)
    mode = p.modes[1]
    assert mode.factor == "prefix_cache_retention_interval" and mode.value == "None" and mode.side == "server"
    notes = " ".join(mode.notes)
    assert "VLLM_PREFIX_CACHE_RETENTION_INTERVAL is recognised" in notes
    assert "no VLLM_PREFIX_CACHE_RETENTION_INTERVAL variable: it reads --prefix-cache-retention-interval" in notes
    assert "3 sliding-window/linear layers of 4" in notes


def test_preset_cache_vs_context():
    llama = cache_vs_context(str(SMALL_KV), None, 4)
    assert [v.name for v in llama.spec.variants] == ["lower-concurrency", "shorter-history"]
    assert llama.spec.variants[0].set == {"concurrency": 2} and "retention: skipped" in llama.notes[0]
    hybrid = cache_vs_context(str(HYBRID), None, 4)
    assert hybrid.spec.variants[-1].set == {"prefix_cache_retention_interval": 0}  # the profile has 512


def test_noise_aware_verdict():
    ttft = BY_KEY["ttft_ms_p95"]
    assert judge(ttft, (100.0, 120.0), (110.0, 130.0)).verdict == "inconclusive"  # ranges overlap
    assert judge(ttft, (100.0, 110.0), (60.0, 70.0)).verdict == "better"
    assert judge(ttft, (100.0, 110.0), (150.0, 170.0)).verdict == "worse"
    assert judge(ttft, (100.0, 100.5), (101.0, 101.5)).verdict == "inconclusive"  # below the 5% minimum effect
    hit = BY_KEY["prefix_cache_hit_rate"]
    assert judge(hit, (0.5, 0.52), (0.7, 0.72)).verdict == "better"
    assert judge(BY_KEY["errors"], (0.0, 0.0), (0.0, 0.0)).verdict == "same"
    assert judge(ttft, (), (1.0,)).verdict == "unmeasured"
    assert "1 repeat each" in judge(ttft, (100.0,), (50.0,)).reason


def test_cut_history_keeps_head_last_steps_and_tail():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a1", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "r1"},
        {"role": "assistant", "content": "a2", "tool_calls": [{"id": "2"}]},
        {"role": "tool", "content": "r2"},
        {"role": "user", "content": "step 3"},
    ]
    req = SetRequest("x", "agent", 0, 3, {"messages": msgs})
    one = cut_history(req, 1).body["messages"]
    assert [m["content"] for m in one] == ["s", "task", "a2", "r2", "step 3"]
    assert [m["content"] for m in cut_history(req, 0).body["messages"]] == ["s", "task", "step 3"]
    assert cut_history(req, 5) is req


def test_cells_against_one_server_with_salt_repeats_and_verdicts(tmp_path):
    exp = experiment(
        tmp_path,
        [
            {"name": "c1", "set": {"concurrency": 1}},
            {"name": "short", "set": {"history_turns": 0}},
            {"name": "out", "set": {"output_tokens": 4}},
        ],
    )
    with FakeOpenAI(token_delay_s=0.001) as fake:
        r = compare(str(exp), CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url))
        salts = {req.get("cache_salt") for req in fake.requests}
    d = r.data
    assert len(d["cells"]) == 8 and d["restarts"] == 0 and d["server_starts"] == 0 and d["reset_methods"] == ["salt"]
    assert len(salts) == 8 and None not in salts  # one salt per cell: no cell warms the next
    assert {c["requests"] for c in d["cells"]} == {12} and all(c["agents_succeeded"] == 4 for c in d["cells"])
    out = {v["metric"]: v for v in d["comparisons"]["out"]}
    assert out["errors"]["verdict"] == "same" and len(out["latency_ms_p95"]["baseline"]) == 2
    short = [c for c in d["cells"] if c["mode"] == "short"]
    base = [c for c in d["cells"] if c["mode"] == "baseline"]
    assert sum(c["prompt_tokens"] for c in short) < sum(c["prompt_tokens"] for c in base)
    saved = json.loads((r.run_dir / "compare.json").read_text())
    assert saved["schema"] == "oomkit.compare/1" and saved["request_set_id"] == d["request_set_id"]


def test_resume_runs_only_the_missing_cells(tmp_path):
    exp = experiment(tmp_path, [{"name": "c1", "set": {"concurrency": 1}}])
    with FakeOpenAI(token_delay_s=0.0005) as fake:
        first = compare(str(exp), CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url, repeats=1))
        sent = len(fake.requests)
        again = compare(
            str(exp),
            CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url, repeats=2, resume=str(first.run_dir)),
        )
        assert len(fake.requests) == 2 * sent  # only the two repeat-2 cells were sent
    assert again.run_dir == first.run_dir and len(again.data["cells"]) == 4


def test_url_refuses_server_side_modes(tmp_path):
    exp = experiment(tmp_path, [{"name": "seqs", "set": {"max_num_seqs": 2}}])
    with pytest.raises(UsageError, match="--url runs client-side modes only; seqs change the server"):
        compare(str(exp), CompareOptions(runs_dir=str(tmp_path), url="http://127.0.0.1:9"))


def test_cli(tmp_path, capsys):
    exp = experiment(tmp_path, [{"name": "c1", "set": {"concurrency": 1}}])
    with FakeOpenAI() as fake:
        with pytest.raises(SystemExit) as code:
            main(["compare", str(exp), "--url", fake.url, "--repeats", "1", "--runs-dir", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code.value.code == 0 and "baseline" in out and "c1" in out and "concurrency=1" in out
    with pytest.raises(SystemExit) as code:
        main(["compare"])
    assert code.value.code == 2 and "EXPERIMENT file or --preset" in capsys.readouterr().err


def test_example_experiments_are_valid():
    for path in sorted((REPO / "examples").glob("experiment-*.yaml")):
        spec = load_experiment(path)
        prof = load_profile(spec.path(spec.profile))
        check_plan(plan_experiment(spec, dict(prof.args)), prof)


def test_reset_endpoint_asked_for_but_not_served(tmp_path):
    exp = experiment(tmp_path, [{"name": "c1", "set": {"concurrency": 1}}], reset="endpoint")
    with FakeOpenAI() as fake:
        with pytest.raises(UsageError, match="VLLM_SERVER_DEV_MODE=1"):
            compare(str(exp), CompareOptions(runs_dir=str(tmp_path / "runs"), url=fake.url, repeats=1))


def test_a_cell_line_has_the_keys_of_its_document():
    """Cell.to_dict is typed CellDoc by a cast over its fields: they must stay the same keys, in order."""
    assert [f.name for f in dataclasses.fields(Cell)] == list(CellDoc.__annotations__)
