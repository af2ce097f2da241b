"""Property tests for the file readers: any input gives a result or an OomkitError, never a crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomkit.env import nvsmi
from oomkit.env.recipe import load_recipe
from oomkit.errors import OomkitError
from oomkit.plan.catalog import find_model
from oomkit.triage import analyse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import robustness  # noqa: E402

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
trees = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


def _ok_or_documented(call) -> None:
    try:
        call()
    except OomkitError:
        pass


@FAST
@given(st.binary(max_size=2000))
def test_logs_never_crash(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "x.log"
    f.write_bytes(data)
    _ok_or_documented(lambda: analyse([str(f)]))


@FAST
@given(st.text(max_size=2000))
def test_nvsmi_parsers_never_crash(text: str) -> None:
    _ok_or_documented(lambda: nvsmi.parse_smi_xml(text, "t"))
    _ok_or_documented(lambda: nvsmi.parse_topo(text, "t"))


@FAST
@given(trees)
def test_recipe_never_crashes(tmp_path: Path, tree: object) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump({"model": tree}))
    _ok_or_documented(lambda: load_recipe(f))


@FAST
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "vocab_size",
                "num_key_value_heads",
                "head_dim",
                "n_routed_experts",
                "text_config",
            ]
        ),
        trees,
        max_size=8,
    )
)
def test_model_config_never_crashes(tmp_path: Path, cfg: dict) -> None:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _ok_or_documented(lambda: find_model(str(tmp_path)))


def test_model_config_with_a_list_for_a_number_is_a_documented_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"hidden_size": [1], "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10})
    )
    try:
        find_model(str(tmp_path))
    except OomkitError as err:
        assert "wrong type" in err.message
    else:
        raise AssertionError("a list as hidden_size must be refused")


def test_harness_finishes_known_readers_without_crash() -> None:
    total = robustness.fuzz(1300, workers=1, seed=7, limit_s=5.0)
    assert sum(t.tried for t in total.values()) == 1300 and len(total) >= 13
    bad = {n: (t.crashes, t.hangs, t.sites) for n, t in total.items() if t.crashes or t.hangs}
    assert not bad, bad


# Inputs the 100,000-input run found (benchmarks/robustness.py); each crashed or hung before its fix.


def test_a_pid_of_5000_digits_is_no_process_prefix(tmp_path: Path) -> None:
    log = tmp_path / "huge-pid.log"
    log.write_text("(EngineCore_DP0 pid=" + "9" * 5000 + ") INFO 12-02 10:00:00 [core.py:1] hello\n")
    assert analyse([str(log)]).verdict.phase


def test_a_figure_too_large_for_an_int_stays_a_float() -> None:
    from oomkit.triage.facts import _num

    assert _num("9" * 400) == float("inf") and _num("1,024") == 1024


def test_runs_lists_an_edited_manifest_as_a_row_not_a_crash(tmp_path: Path) -> None:
    from oomkit.rundir import SCHEMA
    from oomkit.runs import list_runs, render

    base = {"schema": SCHEMA, "run_id": "x", "kind": "ladder", "state": "failed", "files": {}}
    edits = {
        "a-dict-reason": {"reason": {"why": 1}},
        "a-list-of-servers": {"server_runs": ["a"]},
        "files-a-bool": {"files": True},
        "stages-a-float": {"kind": "investigation", "stages": 1.5},
        "huge-int": None,
    }
    for name, edit in edits.items():
        (tmp_path / name).mkdir()
        text = json.dumps({**base, **(edit or {})}) if edit else '{"oomkit_pid": ' + "9" * 5000 + "}"
        (tmp_path / name / "manifest.json").write_text(text)
    runs = {r.path.name: r for r in list_runs(tmp_path, include_parts=True)}
    assert set(runs) == set(edits) and render(list(runs.values()))
    assert runs["a-dict-reason"].reason == "{'why': 1}"
    assert runs["huge-int"].state == "unreadable" and "ValueError" in (runs["huge-int"].reason or "")
    assert runs["files-a-bool"].state == "unreadable" and "unexpected shape" in (runs["files-a-bool"].reason or "")


def test_a_lone_surrogate_read_back_from_json_is_written_as_its_escape(tmp_path: Path) -> None:
    from oomkit.fsio import JsonlWriter, write_json_atomic, write_text_atomic

    value = json.loads('"a\\ud800b"')
    assert json.loads(write_json_atomic(tmp_path / "a.json", {"k": value}).read_text()) == {"k": value}
    assert write_text_atomic(tmp_path / "a.html", value).read_text() == "a\\ud800b"
    writer = JsonlWriter(tmp_path / "a.jsonl")
    writer.append({"k": value})
    writer.close()
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"k": value}


def test_no_rule_pattern_is_quadratic_on_a_long_run_of_word_characters() -> None:
    """A pattern that starts with a repeated class (`[\\w-]+ version ...`) tries every start in a long run of word
    characters: a 1 MB line then took minutes (the harness's giant input, session 26). Every pattern the engine
    applies to a line reads a 40,000-character run in well under a second, with a wide margin for a loaded machine."""
    import time

    from oomkit.triage.knowledge_rules import REFUSAL
    from oomkit.triage.prefilter import rule_patterns

    lines = ("a" * 40_000, "a-" * 20_000, "a." * 20_000, "a " * 20_000)
    slow = {}
    for name, pattern in [*rule_patterns(), ("REFUSAL", REFUSAL)]:
        for line in lines:
            started = time.perf_counter()
            pattern.search(line)
            took_s = time.perf_counter() - started
            if took_s > 1.0:
                slow[name] = round(took_s, 2)
    assert not slow, slow
