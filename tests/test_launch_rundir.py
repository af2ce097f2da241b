"""The run folder: manifest states, atomic rewrites, redaction, lookup by id; memory peaks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from oomkit.errors import InputError
from oomkit.launch.memory import GpuSample, MemorySample, PhasePeaks, ProcessTree, ProcSample, sample_tree
from oomkit.rundir import MANIFEST, RunDir, find_run, latest_run, redact_obj


def test_create_update_finish(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, label="my run/1", kind="launch")
    assert run.path.parent == tmp_path and "my-run-1" in run.run_id
    m = run.manifest()
    assert m["schema"] == "oomkit.run/1" and m["state"] == "running" and m["oomkit_pid"] == os.getpid()
    log = run.file("server.log", "the log")
    assert log == run.path / "server.log" and run.manifest()["files"]["server.log"] == "the log"
    run.update(ready=True)
    run.finish("complete", exit_code=0)
    again = RunDir.open(run.path).manifest()
    assert again["state"] == "complete" and again["ready"] is True and "ended_at" in again
    assert not [p for p in run.path.iterdir() if p.name.startswith(".manifest.json")]  # no temp files left


def test_two_writers_do_not_drop_each_others_fields(tmp_path: Path) -> None:
    owner = RunDir.create(tmp_path)
    stage = RunDir.open(owner.path)  # e.g. a load stage that opened the folder itself
    stage.update(load={"requests": 3})
    stage.file("requests.jsonl", "requests sent")
    owner.finish("complete")
    m = RunDir.open(owner.path).manifest()
    assert m["load"] == {"requests": 3} and m["state"] == "complete" and "requests.jsonl" in m["files"]


def test_states_are_checked(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path)
    with pytest.raises(ValueError):
        run.finish("running")
    with pytest.raises(ValueError):
        run.update(state="exploded")
    with pytest.raises(ValueError):
        run.file("../escape")


def test_secrets_never_reach_the_manifest(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path)
    run.update(
        profile={"args": {"api_key": "plain-looking-value", "max_num_batched_tokens": 256, "hf_token": "abc"}},
        env={"HF_TOKEN": "abc", "WANDB_API_KEY": "k", "VLLM_PORT": "8000"},
        command=["vllm", "serve", "--api-key", "sk-abcdefghijklmnopqrstu"],
        note="Authorization: Bearer eyJhbGciOi.secret",
    )
    text = (run.path / MANIFEST).read_text()
    for secret in ("plain-looking-value", "sk-abcdefghijklmnopqrstu", "eyJhbGciOi.secret", '"abc"', '"k"'):
        assert secret not in text
    m = json.loads(text)
    assert m["profile"]["args"]["max_num_batched_tokens"] == 256 and m["env"]["VLLM_PORT"] == "8000"


def test_redact_obj_keeps_structure() -> None:
    assert redact_obj({"a": [1, "x", {"token": "t"}], "b": None}) == {"a": [1, "x", {"token": "***"}], "b": None}


def test_find_and_latest(tmp_path: Path) -> None:
    a = RunDir.create(tmp_path, label="alpha")
    b = RunDir.create(tmp_path, label="beta")
    b.finish("failed")
    assert find_run(a.path).run_id == a.run_id
    assert find_run(b.run_id, tmp_path).run_id == b.run_id
    assert latest_run(tmp_path, state="running").run_id == a.run_id
    assert latest_run(tmp_path / "none") is None
    with pytest.raises(InputError, match="matches 2 runs"):
        find_run(a.run_id[:9], tmp_path)
    with pytest.raises(InputError, match="no run folder"):
        find_run("zzz", tmp_path)


def test_open_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a run folder"):
        RunDir.open(tmp_path)
    (tmp_path / MANIFEST).write_text("{broken")
    with pytest.raises(InputError, match="unreadable manifest"):
        RunDir.open(tmp_path)
    (tmp_path / MANIFEST).write_text('{"schema": "other"}')
    with pytest.raises(InputError, match="not an oomkit run manifest"):
        RunDir.open(tmp_path)


def _sample(phase: str | None, rss: int, gpus: tuple[int, ...] = ()) -> MemorySample:
    return MemorySample(
        0.0, phase, rss, (ProcSample(1, "p", rss),), tuple(GpuSample(i, g, 100) for i, g in enumerate(gpus))
    )


def test_peaks_per_phase_rss_and_gpu() -> None:
    peaks = PhasePeaks()
    for phase, rss in ((None, 5), ("weight_loading", 10), ("weight_loading", 7), ("ready", 9)):
        peaks.add(_sample(phase, rss))
    assert peaks.primary() == {"starting": 5, "weight_loading": 10, "ready": 9}
    gpu = PhasePeaks()
    gpu.add(_sample("kv_cache_allocation", 1, (10, 30)))
    gpu.add(_sample("kv_cache_allocation", 1, (20, 5)))
    assert gpu.gpu_used_bytes == {"kv_cache_allocation": [20, 30]} and gpu.primary() == {"kv_cache_allocation": 50}


def test_sample_tree_of_this_process() -> None:
    pytest.importorskip("psutil")
    sample = sample_tree(ProcessTree(os.getpid()), 1.0, "ready", None)
    assert sample.rss_bytes > 10_000_000 and sample.procs[0].pid == os.getpid()
    assert sample.to_dict()["phase"] == "ready"
