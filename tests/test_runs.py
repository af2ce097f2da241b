"""`oomkit runs` and the resume bookkeeping, on run folders built with RunDir (no server): states
a reader can trust (a dead owner is `interrupted`, a torn manifest is `unreadable`), parts of
compare runs, resume commands, torn JSONL tails, and the checks that refuse a mismatched resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomkit.cli import main
from oomkit.errors import InputError, UsageError
from oomkit.fsio import read_jsonl
from oomkit.ladder import LadderOptions
from oomkit.loadrun.prepare import TargetSpec
from oomkit.loadrun.resume import drop_torn_tails, merge_options, open_resume, record_from_dict
from oomkit.rundir import RunDir
from oomkit.runs import list_runs, own_create_time, process_alive, render


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make(runs: Path, label: str, kind: str = "ladder", **fields) -> RunDir:
    run = RunDir.create(runs, label, kind=kind)
    run.update(**{"oomkit_create_time": own_create_time(), **fields})
    return run


LADDER = {
    "workload": None,
    "workload_file": None,
    "request_set_id": "abc",
    "spec": {"url": "http://127.0.0.1:9", "profile": None, "model": None, "memory": "auto"},
    "options": {"max_concurrency": 4},
}


def by_label(runs):
    return {r.label: r for r in runs}


def test_states_from_manifests_and_owners(tmp_path):
    done = make(tmp_path, "done")
    done.finish("complete")
    make(tmp_path, "mine")  # owned by this test process, which is alive
    make(tmp_path, "killed", oomkit_pid=dead_pid(), ladder=LADDER)
    make(tmp_path, "reused", oomkit_create_time=own_create_time() - 3600)  # our pid, another process's start
    runs = by_label(list_runs(tmp_path))
    assert runs["done"].state == "complete" and not runs["done"].resumable
    assert runs["mine"].state == "running" and runs["mine"].reason is None and not runs["mine"].resumable
    killed = runs["killed"]
    assert (killed.state, killed.recorded_state, killed.reason) == ("interrupted", "running", "owner_gone")
    assert killed.resumable and killed.resume_command == f"oomkit ladder --resume {killed.run_id} --runs-dir {tmp_path}"
    assert killed.stages == ("ladder",) and "manifest.json" in killed.files
    assert runs["reused"].state == "interrupted" and runs["reused"].reason == "owner_gone"


def test_without_create_time_a_later_process_is_not_the_owner(tmp_path):
    run = RunDir.create(tmp_path, "old", kind="compare")  # compare folders record no oomkit_create_time
    run.update(created_at="2001-01-01T00:00:00.000+00:00")
    assert list_runs(tmp_path)[0].reason == "owner_gone"
    assert process_alive(os.getpid(), None, not_after=None)
    assert not process_alive(os.getpid(), own_create_time() + 10)
    assert not process_alive(True) and not process_alive(-1) and not process_alive("12")


def test_fix_writes_interrupted_owner_gone(tmp_path):
    run = make(tmp_path, "killed", oomkit_pid=dead_pid())
    list_runs(tmp_path)
    assert json.loads((run.path / "manifest.json").read_text())["state"] == "running"  # listing alone writes nothing
    (info,) = list_runs(tmp_path, fix=True)
    m = json.loads((run.path / "manifest.json").read_text())
    assert (m["state"], m["reason"]) == ("interrupted", "owner_gone") and m["ended_at"]
    assert list_runs(tmp_path)[0].recorded_state == "interrupted"


@pytest.mark.parametrize(
    "content,why",
    [
        ('{"schema": "oomkit.run/1", "run_id": "x", "sta', "not JSON"),
        ("", "not JSON"),
        (b"\xff\xfe{", "cannot be read"),
        ('["a list"]', "not an oomkit run manifest"),
        ('{"schema": "other/1"}', "not an oomkit run manifest"),
        ('{"schema": "oomkit.run/1", "state": "exploded"}', "unknown state 'exploded'"),
        (None, "no manifest.json"),
    ],
)
def test_unreadable_folders_are_listed_with_the_reason(tmp_path, content, why):
    folder = tmp_path / "20261202-000000-broken-0000"
    folder.mkdir()
    if content is not None:
        (folder / "manifest.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    (folder / "requests.jsonl").write_text("{}\n")
    make(tmp_path, "fine").finish("complete")
    runs = list_runs(tmp_path)
    broken = next(r for r in runs if r.path == folder)
    assert broken.state == "unreadable" and why in broken.reason and broken.files[-1] == "requests.jsonl"
    assert not broken.resumable and "unreadable" in render(runs)
    assert list_runs(tmp_path, fix=True)[0].state == "unreadable"  # --fix leaves what it cannot read alone
    assert [r.label for r in list_runs(tmp_path, state="complete")] == ["fine"]


def test_compare_parts_are_listed_under_their_compare(tmp_path):
    server = make(tmp_path, "baseline", kind="launch")
    server.finish("complete")
    failed = make(tmp_path, "variant", kind="launch")
    failed.finish("failed")
    comp = make(
        tmp_path,
        "exp",
        kind="compare",
        oomkit_pid=dead_pid(),
        experiment_file="/x/exp.yaml",
        server_runs={"baseline": str(server.path)},
        launch_failures={"v": {"run_dir": str(failed.path)}},
    )
    top = list_runs(tmp_path)
    assert [r.run_id for r in top] == [comp.run_id]
    assert top[0].resume_command == f"oomkit compare /x/exp.yaml --resume {comp.run_id} --runs-dir {tmp_path}"
    parts = by_label(list_runs(tmp_path, include_parts=True))
    assert parts["baseline"].part_of == comp.run_id and parts["variant"].part_of == comp.run_id
    assert "part of" in render(list(parts.values())) and "part of" not in render(top)
    assert not parts["variant"].resumable  # resume the compare, not one of its servers


def test_what_cannot_be_resumed(tmp_path):
    finished = make(tmp_path, "finished", ladder=LADDER, ladder_outcome={"stopped_at": "tool_call"})
    finished.finish("failed")  # the ladder stopped at a failing step: that is its result
    timed = make(tmp_path, "timed", kind="bench", bench={**LADDER, "duration_s": 60.0})
    timed.finish("interrupted")
    launch = make(tmp_path, "launch", kind="launch")
    launch.finish("interrupted")
    old = make(tmp_path, "old", ladder={"workload": None, "options": {}})  # no recorded target: an older oomkit
    old.finish("interrupted")
    assert not any(r.resumable or r.resume_command for r in list_runs(tmp_path))


def test_cli_table_json_and_bad_input(tmp_path, capsys):
    run = make(tmp_path, "killed", oomkit_pid=dead_pid(), ladder=LADDER)
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and run.run_id in out and "interrupted" in out and "owner_gone" in out
    with pytest.raises(SystemExit):
        main(["runs", "--runs-dir", str(tmp_path), "--json", "--state", "interrupted"])
    (info,) = json.loads(capsys.readouterr().out)
    assert info["run_id"] == run.run_id and info["resume_command"].startswith("oomkit ladder --resume")
    for args in (["--runs-dir", str(tmp_path / "nope")], ["--runs-dir", str(tmp_path), "--state", "odd"]):
        with pytest.raises(SystemExit) as exit_:
            main(["runs", *args])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "Traceback" not in err
    with pytest.raises(InputError):
        list_runs(tmp_path / "nope")
    with pytest.raises(UsageError):
        list_runs(tmp_path, state="odd")
    assert render([]) == "no runs"


def test_torn_jsonl_tails_are_dropped_whole_lines_kept(tmp_path):
    (tmp_path / "torn.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3, "b')
    (tmp_path / "nonl.jsonl").write_text('{"a": 1}\n{"a": 2}')  # whole, only the newline is missing
    (tmp_path / "fine.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "one.jsonl").write_text('{"a": 1, "long": "' + "x" * 200_000)  # no newline at all
    assert drop_torn_tails(tmp_path) == {"one.jsonl": 1, "torn.jsonl": 1}
    assert (tmp_path / "torn.jsonl").read_text() == '{"a": 1}\n{"a": 2}\n'
    assert (tmp_path / "nonl.jsonl").read_text() == '{"a": 1}\n{"a": 2}\n'
    assert (tmp_path / "one.jsonl").read_text() == "" and (tmp_path / "fine.jsonl").read_text() == '{"a": 1}\n'
    with open(tmp_path / "torn.jsonl", "a") as fh:
        fh.write('{"a": 4}\n')
    assert [r["a"] for r in read_jsonl(tmp_path / "torn.jsonl")] == [1, 2, 4]


def test_recorded_options_win_and_conflicts_are_refused(tmp_path):
    recorded = {"max_concurrency": 4, "agent_steps": 1, "slos": {"ttft_ms": 500.0}}
    merged = merge_options(LadderOptions, recorded, LadderOptions(), tmp_path)
    assert (merged.max_concurrency, merged.agent_steps, merged.slos) == (4, 1, {"ttft_ms": 500.0})
    assert merge_options(LadderOptions, recorded, LadderOptions(max_concurrency=4), tmp_path) == merged
    with pytest.raises(InputError, match="max_concurrency 8 \\(recorded: 4\\)"):
        merge_options(LadderOptions, recorded, LadderOptions(max_concurrency=8), tmp_path)


def test_resume_refuses_another_target_workload_or_a_live_owner(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\n")
    section = {**LADDER, "workload": str(workload), "workload_file": str(workload.resolve())}
    run = make(tmp_path, "r", ladder=section)
    given = TargetSpec(runs_dir=str(tmp_path))
    with pytest.raises(InputError, match="still running"):
        open_resume(run.run_id, "ladder", given, None)
    run.finish("interrupted")
    job = open_resume(run.run_id, "ladder", given, str(workload))
    assert job.spec.url == "http://127.0.0.1:9" and job.attempt == 1 and not job.finished
    assert json.loads((run.path / "manifest.json").read_text())["state"] == "interrupted"  # nothing claimed yet
    other = tmp_path / "other.yaml"
    other.write_text("name: other\n")
    for kind, spec, wl, text in [
        ("ladder", given, str(other), "was run with workload"),
        ("ladder", TargetSpec(url="http://127.0.0.1:10", runs_dir=str(tmp_path)), None, "--url http://127.0.0.1:10"),
        ("ladder", TargetSpec(profile="p.yaml", runs_dir=str(tmp_path)), None, "--profile p.yaml"),
        ("bench", given, None, "no `oomkit bench` run is recorded"),
    ]:
        with pytest.raises(InputError, match=text):
            open_resume(run.path.name, kind, spec, wl)
    assert open_resume(str(run.path), "ladder", TargetSpec(url="http://127.0.0.1:9/v1/", runs_dir="x"), None).spec


def test_claim_and_holding_put_the_folder_back_in_a_final_state(tmp_path):
    run = make(tmp_path, "r", ladder=LADDER)
    run.finish("interrupted")
    job = open_resume(run.run_id, "ladder", TargetSpec(runs_dir=str(tmp_path)), None)
    with pytest.raises(RuntimeError):
        with job.holding():
            m = json.loads((run.path / "manifest.json").read_text())
            assert m["state"] == "running" and m["ended_at"] is None and m["resumes"][0]["attempt"] == 1
            raise RuntimeError("launch failed")
    m = json.loads((run.path / "manifest.json").read_text())
    assert m["state"] == "failed" and "launch failed" in m["error"]
    assert open_resume(run.run_id, "ladder", TargetSpec(runs_dir=str(tmp_path)), None).attempt == 2


def test_records_read_back_as_they_were_written():
    line = {
        "request_id": "r1",
        "label": "bench",
        "session": 0,
        "step": 1,
        "started_unix_s": 1.5,
        "ok": True,
        "ttft_ms": 3.0,
        "itl_ms": [1.0, 2.0],
        "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}],
        "tool_check": {"valid": False, "problems": ["bad"]},
        "kind": "agent",
        "attempt": 1,
        "run_session": 0,
    }
    rec = record_from_dict(line)
    assert (rec.request_id, rec.itl_ms, rec.tool_calls[0].name, rec.tool_check.problems) == (
        "r1",
        (1.0, 2.0),
        "f",
        ("bad",),
    )
    assert record_from_dict(rec.to_dict()) == rec
    assert record_from_dict({"label": "x"}) is None
