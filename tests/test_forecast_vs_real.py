"""The backtest's `--stored DIR`: the ladders an earlier `--profiles` run left, paired again in the
order it ran them, so its figures can be printed again without a server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import forecast_vs_real as fvr  # noqa: E402 - a benchmark script, imported from its folder

STEMS = (
    "small-kv",
    "small-kv",
    "prefix-cache",
    "prefix-cache",
    "prefix-cache",
    "prefix-cache",
    "hybrid-small-kv",
    "hybrid-small-kv",
)


def _runs(where: Path, stems: tuple[str, ...]) -> None:
    for i, stem in enumerate(stems):
        run = where / f"20261204-2224{i:02d}-testbed-{stem}-{i:04x}"
        run.mkdir()
        (run / "manifest.json").write_text("{}")
    (where / "testbed-small-kv-step-log.yaml").write_text("")  # what --profiles also leaves there


def test_stored_ladders_pair_up_in_the_order_they_ran(tmp_path):
    _runs(tmp_path, STEMS)
    pairs = fvr.stored_pairs(tmp_path)
    assert [name for name, _, _ in pairs] == [name for name, _, _ in fvr.BACKTEST_PROFILES]
    assert [(a.name[-4:], b.name[-4:]) for _, a, b in pairs] == [
        ("0000", "0001"),
        ("0002", "0003"),
        ("0004", "0005"),
        ("0006", "0007"),
    ]


def test_a_folder_that_is_not_one_profiles_run_is_refused(tmp_path):
    _runs(tmp_path, STEMS[:6])
    with pytest.raises(SystemExit, match="6 run folders"):
        fvr.stored_pairs(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _runs(other, ("small-kv", "hybrid-small-kv", *STEMS[2:]))
    with pytest.raises(SystemExit, match="expected two ladders of testbed-small-kv.yaml"):
        fvr.stored_pairs(other)


def test_the_other_ladders_own_figures_are_the_reference_for_the_timing_goals():
    """Two recorded ladders of the small-KV testbed: each one's TTFT p50 read against the other's, as the
    forecast's is; a check per rung both measured."""
    first, second = fvr.PAIRS[0]
    figures = fvr.measured(first)
    figures.pop(0)
    line, checks = fvr._remeasured(figures, second)
    again = fvr.measured(second)
    both = [c for c, m in figures.items() if c in again and m["ttft_ms_p50"] and again[c]["ttft_ms_p50"]]
    assert len(checks) == len(both) > 0
    expected = [abs(again[c]["ttft_ms_p50"] / figures[c]["ttft_ms_p50"] - 1) <= 0.25 for c in both]
    assert checks == expected
    assert line.startswith("re-measured") and f"ttft_ms_p50 {sum(expected)}/{len(both)}" in line
