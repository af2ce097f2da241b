"""`oomkit decide` on run folders: real testbed runs (tests/fixtures/decide, trimmed copies of a
ladder on testbed-small-kv) and launch folders rebuilt from real CPU logs (shared/research/cpu-logs).
Each rule's positive case, the checklist, the team profiles, and unusable input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import CPU_LOGS, need

from oomkit.cli import main
from oomkit.decide import DecideOptions, decide, load_requirements, parse_requirements
from oomkit.decide.render import render
from oomkit.errors import InputError

FIX = Path(__file__).parent / "fixtures" / "decide"
REPO = Path(__file__).resolve().parent.parent
REQ = REPO / "examples" / "requirements-testbed.yaml"


def requirements(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(REQ.read_text())
    data.pop("workload")
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / "req.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def copy_run(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / "runs" / name
    shutil.copytree(FIX / name, dst)
    return dst


def launch_folder(tmp_path: Path, log: str, args: dict | None = None, ready: bool = False) -> Path:
    """A launch run folder as `oomkit launch` leaves it after a failed start, from a real log."""
    from oomkit.triage import analyse

    src = need(CPU_LOGS / log)
    folder = tmp_path / "runs" / f"launch-{log.removesuffix('.log')}"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "server.log")
    t = analyse([str(folder / "server.log")]).to_dict()
    manifest = {
        "schema": "oomkit.run/1",
        "run_id": folder.name,
        "kind": "launch",
        "state": "failed",
        "oomkit_version": "0.1.0",
        "files": {"manifest.json": "this file", "server.log": "log"},
        "profile": {"model": "testbed:llama", "args": args or {}},
        "command": ["python", "-m", "vllm"],
        "ready": ready,
        "reason": "exited_before_ready",
        "verdict": t["verdict"],
        "phases": [{"phase": p["phase"], "line": p["line"]} for p in t["timeline"]],
        "figures": t["facts"]["figures"],
        "vllm_version": t["facts"]["vllm_version"],
        "env_snapshot": {
            "source": "live",
            "gpus": [],
            "gpu_note": "no NVIDIA GPU",
            "software": {"cuda_flavour": "cpu", "vllm_version": "0.32.0"},
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def run_decide(tmp_path, runs, req=None, team="production"):
    return decide(
        [str(r) for r in runs],
        str(req or requirements(tmp_path)),
        DecideOptions(team=team, runs_dir=str(tmp_path / "decisions")),
    )


# -- the rules, on real evidence ------------------------------------------------------------------


def test_small_kv_above_the_knee_expands_with_headroom_numbers(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")])
    assert d.verdict == "expand" and d.rule["id"] == "concurrency_headroom"
    n = d.numbers
    assert n["capacity_concurrency"] == 2 and n["first_bad_concurrency"] == 3 and n["target_concurrency"] == 4
    assert n["headroom_pct"] == -50.0 and n["target_with_reserve"] == 5.0 and n["engines_needed"] == 3
    assert any("ladder.json: concurrency rung c=3" in e["source"] for e in d.evidence)
    assert "lower concurrency to 2" in d.recommendations[0]
    saved = json.loads((d.run_dir / "decision.json").read_text())
    assert saved["verdict"] == "expand" and saved["checklist"]["phases"] == "done"


def test_small_kv_below_the_knee_is_tune_when_the_reserve_fits(tmp_path):
    req = requirements(tmp_path, concurrent_dialogs=1, peak_reserve_pct=100)
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    assert d.verdict == "tune" and d.numbers["headroom_pct"] == 100.0
    assert "cap max_num_seqs at 2" in d.recommendations[0]


def test_headroom_below_reserve_expands_even_when_the_target_holds(tmp_path):
    req = requirements(tmp_path, concurrent_dialogs=2, peak_reserve_pct=25)
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    assert d.verdict == "expand" and d.numbers["headroom_pct"] == 0.0
    assert "below the 25% reserve" in d.summary


def test_slo_breach_counts_as_a_failing_level(tmp_path):
    req = requirements(
        tmp_path, concurrent_dialogs=1, peak_reserve_pct=0, slo={"ttft_p95_ms": 100, "e2e_p95_ms": 30000}
    )
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    # c=1 answered its first token in 67 ms; c=2 took 790 ms: above the 100 ms SLO.
    assert d.numbers["capacity_concurrency"] == 1 and d.numbers["first_bad_concurrency"] == 2
    assert d.verdict == "tune"


def test_a_rejected_tool_call_is_the_launch_command(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-no-tool-parser")])
    assert d.verdict == "fix_environment" and d.rule["id"] == "setup_rejects_requests"
    assert "requires --tool-call-parser" in d.summary


def test_an_engine_error_that_is_not_memory_is_fixed_first(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-hybrid-engine-error")])
    assert d.verdict == "fix_environment" and d.rule["id"] == "not_a_memory_failure"
    assert "CPU Generator does not use offset" in d.summary
    assert any(e.get("line") and "RuntimeError" in (e.get("text") or "") for e in d.evidence)


def test_load_phase_oom_is_topology_or_expansion_never_max_num_seqs(tmp_path):
    d = run_decide(tmp_path, [launch_folder(tmp_path, "oom_weights_memoryerror.log")])
    assert d.rule["id"] == "load_phase_oom" and d.verdict in ("change_topology", "expand")
    assert d.evidence and d.evidence[0]["line"] and "MemoryError" in json.dumps(d.evidence)
    advice = " ".join(d.recommendations)
    assert "do not lower max_num_seqs" in advice and not any(
        r.startswith("lower max_num_seqs") for r in d.recommendations
    )


def test_load_phase_oom_with_unused_gpus_changes_topology(tmp_path):
    folder = launch_folder(tmp_path, "oom_weights_memoryerror.log")
    m = json.loads((folder / "manifest.json").read_text())
    m["env_snapshot"]["gpus"] = [{"name": "H200", "memory_total_bytes": 141 * 2**30}] * 4
    m["env_snapshot"]["visible_gpu_indices"] = [0, 1, 2, 3]
    (folder / "manifest.json").write_text(json.dumps(m))
    d = run_decide(tmp_path, [folder])
    assert d.verdict == "change_topology" and d.numbers["tensor_parallel_size"] == 4 and d.numbers["gpus_used"] == 1


def test_load_phase_with_a_deployment_asks_the_planner(tmp_path):
    req = requirements(tmp_path, deployment={"model": "Qwen/Qwen3-32B", "gpu": "H100-80GB", "gpus_per_node": 8})
    d = run_decide(tmp_path, [launch_folder(tmp_path, "oom_weights_memoryerror.log")], req)
    assert d.verdict in ("change_topology", "expand") and ("layout" in d.numbers or "planner_error" in d.numbers)


def test_kv_pool_that_holds_the_required_request_is_tune(tmp_path):
    # kv_bytes_too_small.log: max_model_len 4096 does not fit; vLLM estimates 1792 tokens fit.
    d = run_decide(tmp_path, [launch_folder(tmp_path, "kv_bytes_too_small.log")])
    assert d.verdict == "tune" and d.numbers["estimated_max_model_len"] == 1792
    assert d.recommendations[0].startswith("set max_model_len to 996")


def test_kv_pool_below_the_required_request_is_not_a_setting(tmp_path):
    req = requirements(tmp_path, input_tokens={"typical": 2000, "max": 3000})
    d = run_decide(tmp_path, [launch_folder(tmp_path, "kv_bytes_too_small.log")], req)
    assert d.rule["id"] == "kv_pool_below_one_request" and d.verdict in ("expand", "change_topology")
    assert "short by 1.73x" in d.summary


def test_environment_mismatch_comes_first(tmp_path):
    runs = [launch_folder(tmp_path, "gmu_099.log"), copy_run(tmp_path, "ladder-small-kv")]
    d = run_decide(tmp_path, runs)
    assert d.verdict == "fix_environment" and d.rule["id"] == "environment_mismatch"
    assert any("desired CPU memory utilization" in (e.get("text") or "") for e in d.evidence)


def test_recipe_check_is_evidence(tmp_path):
    """--recipe checks the snapshot a launch recorded (here a captured 8x B200 node) against the
    recipe: its failed rows are the verdict's evidence, its NVLink row the network item."""
    from oomkit.env import load_snapshot_from_dir

    folder = launch_folder(tmp_path, "gmu_099.log", {"tensor_parallel_size": 2}, ready=True)
    m = json.loads((folder / "manifest.json").read_text())
    m["env_snapshot"] = load_snapshot_from_dir(str(REPO / "tests" / "fixtures" / "env" / "b200-8x-r580")).to_dict()
    (folder / "manifest.json").write_text(json.dumps(m))
    recipe = REPO / "tests" / "fixtures" / "recipes" / "meta-llama--Llama-3.1-8B-Instruct.yaml"
    d = decide(
        [str(folder)],
        str(requirements(tmp_path)),
        DecideOptions(team="platform", runs_dir=str(tmp_path / "decisions"), recipe=str(recipe), forecast=False),
    )
    assert d.recipe_check is not None and d.recipe_check.overall == "fail"
    failed = [r.requirement for r in d.recipe_check.rows if r.status == "fail"]
    assert d.rule["id"] == "environment_mismatch" and d.numbers["recipe_rows_failed"] == len(failed) >= 1
    assert [e.get("recipe_row") for e in d.evidence] == failed[:4] and "found 8x NVIDIA B200" in render(d.to_dict())
    assert {c.key: c.status for c in d.criteria}["recipe"] == "failed"
    network = next(i for i in d.checklist if i.key == "network")
    assert network.status == "done" and "NVLink" in network.detail
    saved = json.loads((d.run_dir / "decision.json").read_text())
    assert saved["recipe_check"]["overall"] == "fail" and saved["recipe_check"]["recipe"] == "Llama-3.1-8B-Instruct"


# -- team profiles ----------------------------------------------------------------------------------


def test_research_team_asks_nothing_more(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], team="research")
    assert d.verdict == "tune" and d.rule["id"] == "team_criteria" and d.team["name"] == "research"
    assert [c.status for c in d.criteria] == ["done"] * 4


def test_research_team_with_failed_tools_is_inconclusive_or_environment(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-no-tool-parser")], team="research")
    assert d.verdict == "fix_environment"  # the environment rule comes before any team criterion


def test_agent_team_needs_the_comparisons(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], team="agent")
    assert d.verdict == "inconclusive" and "cache-vs-context comparisons (missing)" in d.summary


def test_platform_team_stops_at_the_first_check(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], team="platform")
    assert d.verdict == "inconclusive" and "platform check 1 of 8" in d.summary and "nvidia-smi" in d.summary


def test_poc_team_uses_the_ladder_criteria(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], team="poc")
    assert {c.key: c.status for c in d.criteria}["knee"] == "done"
    assert d.verdict == "expand"


# -- the checklist ----------------------------------------------------------------------------------


def test_checklist_item_by_item(tmp_path):
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")])
    items = {i.key: i for i in d.checklist}
    assert len(items) == 12
    assert items["initialised"].status == "done" and "ready after" in items["initialised"].detail
    assert items["cuda"].status == "missing" and "no NVIDIA GPU" in items["cuda"].detail
    assert items["same_request_set"].status == "missing"  # one measurement only
    assert items["prefix_caching"].status == "done" and items["network"].status == "done"
    assert items["retest"].status in ("done", "missing") and (d.run_dir / "retest.md").is_file()


def test_prefix_caching_off_without_comparison_fails_the_checklist(tmp_path):
    run = copy_run(tmp_path, "ladder-small-kv")
    m = json.loads((run / "manifest.json").read_text())
    m["profile"]["args"]["enable_prefix_caching"] = False
    (run / "manifest.json").write_text(json.dumps(m))
    d = run_decide(tmp_path, [run])
    assert {i.key: i.status for i in d.checklist}["prefix_caching"] == "failed"
    assert not any("enable_prefix_caching" in r for r in d.recommendations)


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change,text",
    [
        ({"recovery_time_s": "5m"}, "the unit is seconds: write 300"),
        ({"slo": {"ttft_p95_ms": "2s", "e2e_p95_ms": 30000}}, "the unit is milliseconds: write 2000"),
        ({"peak_reserve_pct": "25%"}, "write the number without % (25)"),
        ({"input_tokens": {"typical": "12k", "max": 20000}}, "write the plain number: 12000"),
        ({"input_tokens": {"typical": 900, "max": 700}}, "typical (900) is larger than max (700)"),
        ({"concurent_dialogs": 3}, "did you mean `concurrent_dialogs`"),
    ],
)
def test_requirements_with_wrong_units_say_what_to_write(tmp_path, change, text):
    with pytest.raises(InputError) as err:
        load_requirements(requirements(tmp_path, **change))
    assert text in err.value.one_line()


def test_requirements_missing_fields_are_named(tmp_path):
    with pytest.raises(InputError) as err:
        parse_requirements({"name": "x", "concurrent_dialogs": 4})
    msg = err.value.one_line()
    for field in ("input_tokens", "output_tokens", "slo", "peak_reserve_pct", "recovery_time_s"):
        assert field in msg


def test_run_from_another_oomkit_version_says_what_is_missing(tmp_path):
    run = copy_run(tmp_path, "ladder-small-kv")
    lad = json.loads((run / "ladder.json").read_text())
    del lad["knee"], lad["poc"]
    (run / "ladder.json").write_text(json.dumps(lad))
    with pytest.raises(InputError) as err:
        run_decide(tmp_path, [run])
    assert "ladder.json lacks knee, poc" in err.value.one_line()
    m = json.loads((run / "manifest.json").read_text())
    m["schema"] = "oomkit.run/0"
    (run / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match="schema 'oomkit.run/0'"):
        run_decide(tmp_path, [run])


def test_runs_with_different_request_sets_are_refused(tmp_path):
    a = copy_run(tmp_path, "ladder-small-kv")
    b = copy_run(tmp_path, "ladder-no-tool-parser")
    lad = json.loads((b / "ladder.json").read_text())
    lad["request_set_id"] = "0000000000000000"
    (b / "ladder.json").write_text(json.dumps(lad))
    with pytest.raises(InputError) as err:
        run_decide(tmp_path, [a, b])
    assert "different request sets" in err.value.one_line() and "meaningless" in err.value.one_line()


def test_cli_json_and_errors(tmp_path, capsys):
    run = copy_run(tmp_path, "ladder-small-kv")
    with pytest.raises(SystemExit) as code:
        main(
            [
                "decide",
                str(run),
                "--requirements",
                str(requirements(tmp_path)),
                "--json",
                "--runs-dir",
                str(tmp_path / "d"),
            ]
        )
    assert code.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "expand" and out["checklist"]["phases"] == "done" and out["team"]["name"] == "production"
    with pytest.raises(SystemExit) as code:
        main(["decide", str(tmp_path / "nope"), "--requirements", str(REQ)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.startswith("oomkit: error:") and "Traceback" not in err


def test_decides_view_of_a_ladder_step_has_the_keys_the_ladder_writes():
    """decide reads steps through its StepDoc (decide/documents.py), written by ladder's StepResult:
    a field added or renamed on one side must show up here, not as a silent None in a rule."""
    import dataclasses

    from oomkit.decide.documents import StepDoc
    from oomkit.ladder.result import StepResult

    assert [f.name for f in dataclasses.fields(StepResult)] == list(StepDoc.__annotations__)


# -- one request of the requirement (the rule the helper's split found no test reaching) ------------


def test_a_request_over_the_ladders_context_limit_is_tune_when_the_pool_holds_it(tmp_path):
    # The ladder's history doubling found the server's limit at 1024 tokens; its KV pool holds 1536.
    req = requirements(tmp_path, input_tokens={"typical": 900, "max": 1300})
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    assert d.rule["id"] == "one_target_request_fails" and d.verdict == "tune"
    assert d.numbers["context_limit_tokens"] == 1024 and d.numbers["kv_cache_tokens"] == 1536


def test_a_request_over_the_context_limit_and_the_pool_is_expand(tmp_path):
    req = requirements(tmp_path, input_tokens={"typical": 900, "max": 3000})
    d = run_decide(tmp_path, [copy_run(tmp_path, "ladder-small-kv")], req)
    assert d.rule["id"] == "one_target_request_fails" and d.verdict in ("expand", "change_topology")
    assert d.numbers["longest_request_tokens"] > d.numbers["kv_cache_tokens"] == 1536


def test_a_single_request_oom_while_serving_is_capacity_not_concurrency(tmp_path):
    run = copy_run(tmp_path, "ladder-small-kv")
    ladder = json.loads((run / "ladder.json").read_text())
    first = ladder["steps"][0]
    assert first["name"] == "short_request"
    first["ok"] = False
    first["failure"] = {"phase": "serving_prefill", "reason": "CUDA out of memory", "kind": "oom", "evidence": []}
    (run / "ladder.json").write_text(json.dumps(ladder))
    d = run_decide(tmp_path, [run])
    assert d.rule["id"] == "one_target_request_fails" and d.verdict in ("expand", "change_topology")
    assert d.numbers["phase"] == "serving_prefill"
    assert not any("max_num_seqs" in r or "lower concurrency" in r for r in d.recommendations)
