"""Long runs: 10,000 requests through `oomkit bench --profile` against a real vLLM CPU server, with
oomkit's own memory (RSS of the oomkit process alone, not the server it launched) sampled from
outside every 0.5 s. Goal: flat memory. The slope is the least-squares fit of RSS against requests
done (and against minutes), over the samples after the warm-up requests; above the threshold the
benchmark exits 1.

    flock /tmp/oomkit-dev.lock .venv/bin/python benchmarks/long_run.py [--requests N] [--json]

Requests are short (prompts of about 40 tokens, 1-4 output tokens, no tools) so that on 2 cores
the run is bounded by oomkit and vLLM's per-request work, not by decoding.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
STEPS = 4
SET_SESSIONS = 50  # the request set: 200 distinct requests, cycled by --sessions
WARMUP_REQUESTS = 1_000
MAX_SLOPE_KIB_PER_1K = 256.0
"""Acceptance: at most 256 KiB of RSS per 1,000 requests after the warm-up (256 MiB per million
requests). Exact percentiles keep a few floats per request (about 60 bytes), which stays far below."""

WORKLOAD = {
    "name": "long-run",
    "seed": 7,
    "sessions": SET_SESSIONS,
    "steps": STEPS,
    "system_instruction_tokens": 24,
    "format_rules_tokens": 4,
    "user_task_tokens": 6,
    "workflow_metadata_tokens": 4,
    "tools": {"count": 0, "choice": "none"},
    "history": {"assistant_action_tokens": 2, "tool_result_tokens": 2},
    "output_tokens": [1, 4],
    "ignore_eos": True,
    "temperature": 0.0,
}


def profile(max_num_seqs: int) -> dict:
    return {
        "label": "long-run",
        "model": "testbed:llama",
        "port": "auto",
        "start_timeout_s": 300.0,
        "args": {
            "dtype": "bfloat16",
            "enforce_eager": True,
            "max_model_len": 512,
            "gpu_memory_utilization": 0.3,
            "kv_cache_memory_bytes": 64 << 20,
            "enable_prefix_caching": True,
            "max_num_seqs": max_num_seqs,
        },
        "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    }


@dataclass(frozen=True)
class Sample:
    t_s: float
    requests: int
    rss_bytes: int


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys on xs; None with fewer than two distinct xs."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / sxx


class Watcher:
    """Samples the oomkit process's RSS and the lines of requests.jsonl every `interval_s`."""

    def __init__(self, pid: int, runs: Path, interval_s: float = 0.5):
        self.proc = psutil.Process(pid)
        self.runs, self.interval_s = runs, interval_s
        self.samples: list[Sample] = []
        self._file: Path | None = None
        self._offset = self._lines = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watcher:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _requests(self) -> int:
        if self._file is None:
            self._file = next(iter(self.runs.glob("*/requests.jsonl")), None)
            if self._file is None:
                return 0
        with open(self._file, "rb") as fh:  # count new lines only: the file grows to megabytes
            fh.seek(self._offset)
            chunk = fh.read()
        self._offset += len(chunk)
        self._lines += chunk.count(b"\n")
        return self._lines

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                rss = self.proc.memory_info().rss
            except psutil.Error:
                return
            self.samples.append(Sample(time.monotonic() - self._t0, self._requests(), rss))


def run(requests: int, concurrency: int, max_num_seqs: int, workdir: Path) -> dict:
    (workdir / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    (workdir / "profile.yaml").write_text(yaml.safe_dump(profile(max_num_seqs)))
    runs = workdir / "runs"
    sessions = -(-requests // STEPS)
    argv = [
        sys.executable,
        "-m",
        "oomkit",
        "bench",
        "--profile",
        str(workdir / "profile.yaml"),
        "--workload",
        str(workdir / "workload.yaml"),
        "--concurrency",
        str(concurrency),
        "--sessions",
        str(sessions),
        "--runs-dir",
        str(runs),
        "--memory",
        "none",
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    began = time.monotonic()
    with open(workdir / "stdout.json", "wb") as out, open(workdir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        watcher = Watcher(proc.pid, runs).start()
        rc = proc.wait()
        watcher.stop()
    wall_s = time.monotonic() - began
    if rc != 0:
        raise SystemExit(f"oomkit bench exited {rc}:\n{(workdir / 'stderr.txt').read_text()[-3000:]}")
    result = json.loads((workdir / "stdout.json").read_text())
    with open(workdir / "rss-samples.jsonl", "w") as fh:
        fh.writelines(json.dumps(asdict(s)) + "\n" for s in watcher.samples)
    return summarise(watcher.samples, result, wall_s)


def summarise(samples: list[Sample], result: dict, wall_s: float) -> dict:
    # The load phase: after the warm-up requests, until the last request was written (then the
    # server stops, and the final summary and triage run: not per-request memory).
    total = max((s.requests for s in samples), default=0)
    steady = [s for s in samples if WARMUP_REQUESTS <= s.requests < total]
    per_req = slope([s.requests for s in steady], [s.rss_bytes / 1024 for s in steady])
    per_min = slope([s.t_s / 60 for s in steady], [s.rss_bytes / 1024 for s in steady])
    loading = [s for s in samples if 0 < s.requests]
    client = result["client"]
    out = {
        "requests": client["requests"],
        "ok": client["ok"],
        "errors": client["errors"],
        "bench_duration_s": result["duration_s"],
        "wall_s": round(wall_s, 1),
        "requests_per_s": round(client["requests"] / result["duration_s"], 1) if result["duration_s"] else None,
        "samples": len(samples),
        "steady_samples": len(steady),
        "warmup_requests": WARMUP_REQUESTS,
        "rss_start_mib": _mib(loading[0].rss_bytes) if loading else None,
        "rss_after_warmup_mib": _mib(steady[0].rss_bytes) if steady else None,
        "rss_end_mib": _mib(steady[-1].rss_bytes) if steady else None,
        "rss_peak_mib": _mib(max(s.rss_bytes for s in samples)) if samples else None,
        "slope_kib_per_1k_requests": None if per_req is None else round(per_req * 1000, 1),
        "slope_kib_per_minute": None if per_min is None else round(per_min, 1),
        "threshold_kib_per_1k_requests": MAX_SLOPE_KIB_PER_1K,
    }
    out["flat"] = per_req is not None and per_req * 1000 < MAX_SLOPE_KIB_PER_1K
    return out


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=32, help="agent sessions at once")
    ap.add_argument("--max-num-seqs", type=int, default=32, help="vLLM's batch limit")
    ap.add_argument("--keep", type=Path, help="keep the run folder and raw samples here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oomkit-long-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        out = run(args.requests, args.concurrency, args.max_num_seqs, workdir)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key:<30} {value}")
        verdict = "PASS" if out["flat"] else "FAIL"
        print(
            f"{verdict}: {out['slope_kib_per_1k_requests']} KiB per 1,000 requests after "
            f"{WARMUP_REQUESTS:,} (threshold < {MAX_SLOPE_KIB_PER_1K:g})"
        )
    sys.exit(0 if out["flat"] else 1)


if __name__ == "__main__":
    main()
