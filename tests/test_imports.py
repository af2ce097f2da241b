"""Imports as evidence: real `vllm bench serve --save-result` files (run against the CPU testbed,
tests/fixtures/decide/imports) and a GuideLLM benchmarks.json in the layout of guidellm 0.8's
GenerativeBenchmarksReport.model_dump(mode="json")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_decide import copy_run, requirements

from oomkit.decide import DecideOptions, decide
from oomkit.errors import InputError
from oomkit.imports import read_import

IMPORTS = Path(__file__).parent / "fixtures" / "decide" / "imports"


def _dist(p50: float, p95: float, p99: float) -> dict:
    summary = {
        "mean": p50,
        "median": p50,
        "mode": p50,
        "variance": 0.0,
        "std_dev": 0.0,
        "min": p50,
        "max": p99,
        "count": 10,
        "total_sum": p50 * 10,
        "percentiles": {
            "p001": p50,
            "p01": p50,
            "p05": p50,
            "p10": p50,
            "p25": p50,
            "p50": p50,
            "p75": p95,
            "p90": p95,
            "p95": p95,
            "p99": p99,
            "p999": p99,
        },
    }
    return {"successful": summary, "errored": None, "incomplete": None, "total": summary}


def guidellm_report(tmp_path: Path, streams: list[int], errored: int = 0) -> Path:
    benchmarks = []
    for i, n in enumerate(streams):
        benchmarks.append(
            {
                "type_": "generative_benchmark",
                "config": {"strategy": {"type_": "concurrent", "streams": n}},
                "scheduler_metrics": {"measure_start_time": 100.0, "measure_end_time": 110.0},
                "metrics": {
                    "request_totals": {
                        "successful": 10,
                        "errored": errored if n > 2 else 0,
                        "incomplete": 0,
                        "total": 10 + (errored if n > 2 else 0),
                    },
                    "time_to_first_token_ms": _dist(50.0 * n, 80.0 * n, 90.0 * n),
                    "request_latency": _dist(0.5 * n, 0.8 * n, 0.9 * n),  # seconds in GuideLLM
                    "output_tokens_per_second": {"successful": {"mean": 300.0 + i}},
                },
            }
        )
    data = {
        "metadata": {"version": 2, "guidellm_version": "0.8.1"},
        "config": {"data": ["prompt_tokens=700,output_tokens=96"], "random_seed": 42},
        "benchmarks": benchmarks,
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    return path


def test_vllm_bench_serve_result():
    run = read_import(IMPORTS / "vllm-bench-c4.json")
    assert run.tool == "vllm bench serve" and run.model == "tiny"
    (p,) = run.points
    assert p.concurrency == 4.0 and p.requests == 16 and p.errors == 0
    assert p.ttft_ms_p95 == pytest.approx(132.849, abs=0.01) and p.latency_ms_p95 == pytest.approx(299.085, abs=0.01)
    assert run.request_set_id == read_import(IMPORTS / "vllm-bench-c2.json").request_set_id


def test_guidellm_report_points(tmp_path):
    run = read_import(guidellm_report(tmp_path, [1, 2, 4], errored=3))
    assert run.tool == "guidellm" and [p.concurrency for p in run.points] == [1.0, 2.0, 4.0]
    p4 = run.points[2]
    assert p4.errors == 3 and p4.requests == 13 and p4.latency_ms_p95 == pytest.approx(3200.0)
    assert p4.ttft_ms_p95 == pytest.approx(320.0) and p4.duration_s == 10.0


def test_imports_decide_next_to_each_other(tmp_path):
    d = decide(
        [str(IMPORTS / "vllm-bench-c2.json"), str(IMPORTS / "vllm-bench-c4.json")],
        str(requirements(tmp_path, concurrent_dialogs=2)),
        DecideOptions(runs_dir=str(tmp_path / "d")),
    )
    assert d.verdict == "tune" and d.numbers["capacity_concurrency"] == 4.0
    assert any("vllm-bench-c4.json" in e["source"] for e in d.evidence)


def test_guidellm_errors_mark_the_failing_level(tmp_path):
    d = decide(
        [str(guidellm_report(tmp_path, [1, 2, 4], errored=3))],
        str(requirements(tmp_path)),
        DecideOptions(runs_dir=str(tmp_path / "d")),
    )
    assert (
        d.verdict == "expand" and d.numbers["capacity_concurrency"] == 2.0 and d.numbers["first_bad_concurrency"] == 4.0
    )


def test_an_import_and_an_oomkit_run_with_other_requests_are_refused(tmp_path):
    with pytest.raises(InputError, match="different request sets"):
        decide(
            [str(IMPORTS / "vllm-bench-c2.json"), str(copy_run(tmp_path, "ladder-small-kv"))],
            str(requirements(tmp_path)),
            DecideOptions(runs_dir=str(tmp_path / "d")),
        )


def test_unrecognised_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="neither a `vllm bench serve --save-result` JSON nor a GuideLLM"):
        read_import(bad)
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not a JSON result file"):
        read_import(bad)
    bad.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(InputError, match="no benchmarks list"):
        read_import(bad)
