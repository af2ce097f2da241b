"""`oomkit bench --profile` with a REAL vLLM CPU server that oomkit launches, whose worker is
killed mid-run: every finished request stays on disk, the failure is classified from the
server log, oomkit exits 1 with one line. One server start; run under the shared lock:
    flock /tmp/oomkit-vllm.lock .venv/bin/python -m pytest tests/test_bench_server.py -q
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from oomkit.fsio import read_jsonl

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (pip install 'oomkit[testbed]')"),
]
WORKLOAD = str(Path(__file__).resolve().parent.parent / "examples" / "workload-testbed.yaml")
PROFILE = {
    "label": "bench-kill",
    "model": "testbed:llama",
    "port": "auto",
    "start_timeout_s": 300.0,
    "args": {
        "dtype": "bfloat16",
        "enforce_eager": True,
        "max_model_len": 1024,
        "gpu_memory_utilization": 0.3,
        "kv_cache_memory_bytes": 16 * 2**20,
        "enable_prefix_caching": True,
    },
    "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
}


def worker_of(pid: int) -> psutil.Process | None:
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    return next((p for p in procs if "VLLM::Worker" in p.name() or "VLLM::Worker" in " ".join(p.cmdline())), None)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kill")
    profile = tmp / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    runs = tmp / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oomkit",
            "bench",
            "--profile",
            str(profile),
            "--workload",
            WORKLOAD,
            "--concurrency",
            "4",
            "--duration",
            "300s",
            "--runs-dir",
            str(runs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 400
    victim = None
    while time.monotonic() < deadline and proc.poll() is None:
        done = [r for d in runs.glob("*") for r in read_jsonl(d / "requests.jsonl")] if runs.exists() else []
        if sum(r["ok"] for r in done) >= 4:
            victim = worker_of(proc.pid)
            if victim:
                victim.kill()
                break
        time.sleep(0.5)
    out, err = proc.communicate(timeout=120)
    run = next(runs.iterdir())
    return {"rc": proc.returncode, "out": out, "err": err, "run": run, "victim": victim}


def test_the_run_fails_with_one_line(killed):
    assert killed["victim"] is not None, killed["err"][-2000:]
    assert killed["rc"] == 1
    errors = [ln for ln in killed["err"].splitlines() if ln.startswith("oomkit:")]
    assert len(errors) == 1 and "the server died during the bench" in errors[0]
    assert "Traceback" not in killed["err"]


def test_finished_requests_are_on_disk(killed):
    records = read_jsonl(killed["run"] / "requests.jsonl")
    ok = [r for r in records if r["ok"]]
    assert len(ok) >= 4 and all(r["output_tokens"] == 96 for r in ok)
    assert any(r["error_kind"] in ("engine_dead", "reset", "refused") for r in records)
    saved = json.loads((killed["run"] / "bench.json").read_text())
    assert saved["died"] and saved["client"]["ok"] == len(ok)


def test_failure_is_classified_from_the_server_log(killed):
    saved = json.loads((killed["run"] / "bench.json").read_text())
    failure = saved["failure"]
    assert failure["kind"] == "engine_dead"
    assert failure["source"] == "server log" and failure["phase"] not in ("healthy", "unknown")
    assert any(
        "died unexpectedly" in (e.get("text") or "") or "EngineDead" in (e.get("text") or "")
        for e in failure["evidence"]
    )
    manifest = json.loads((killed["run"] / "manifest.json").read_text())
    assert manifest["bench_outcome"]["died"] and manifest["bench_outcome"]["failure"]["kind"] == "engine_dead"
    assert manifest["kind"] == "launch" and (killed["run"] / "server.log").is_file()
