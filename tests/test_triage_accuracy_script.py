"""benchmarks/triage_accuracy.py on a small labelled folder: parts, and --collections restricting the
cases to some id letters (a first score on collections no rule was written from)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import triage_accuracy  # noqa: E402

KV_LOG = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`\n"


def _case(folder: Path, case_id: str, phase: str) -> None:
    (folder / f"{case_id}.log").write_text(KV_LOG)
    label = {"phase": phase, "is_oom": True, "confidence": "high"}
    (folder / f"{case_id}.json").write_text(json.dumps({"label": label}))


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    _case(tmp_path, "a001", "kv_cache_allocation")
    _case(tmp_path, "a002", "kv_cache_allocation")
    _case(tmp_path, "x001", "weight_loading")  # labelled otherwise: a miss, outside collection a
    split = {"a001": "dev", "a002": "heldout", "x001": "dev"}
    (tmp_path / "split.json").write_text(json.dumps({"cases": split}))
    return tmp_path


def test_parts_count_every_case(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert triage_accuracy.main([str(folder)]) == 0
    out = capsys.readouterr().out
    assert "[dev]: 2 logs" in out and "accuracy 1/2 = 50.0%" in out
    assert "[heldout]: 1 logs" in out and "miss: x001.log" in out


def test_collections_keep_only_those_ids(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert triage_accuracy.main([str(folder), "--collections", "a"]) == 0
    out = capsys.readouterr().out
    assert "[dev]: 1 logs" in out and "accuracy 1/1 = 100.0%" in out
    assert "x001" not in out
