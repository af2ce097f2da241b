"""Triage speed on a large multi-rank log, against grep.

    python benchmarks/triage_speed.py [--gib 1.0] [--ranks 4] [--keep DIR]

Writes a log folder of about --gib GiB (one file per rank: access lines, stats lines, worker debug
chatter, and a CUDA OOM near the end of one rank), then times, in this shell:
  reference: `grep -E -n PATTERN FILES` with the same key patterns oomkit prefilters on;
  oomkit:    `python -m oomkit triage FOLDER --json` (a subprocess, so its peak RSS is its own).
Prints both wall times, the ratio oomkit/grep, oomkit's peak RSS, and the verdict (it must be
the planted OOM). Goal: ratio <= 3, RSS <= 200 MB."""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oomkit.triage.fast import engine_name
from oomkit.triage.rules import KEYWORDS

ACCESS = '(APIServer pid=4100) INFO:     10.1.0.{a}:{p} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
STATS = (
    "(APIServer pid=4100) INFO 12-02 {t} [loggers.py:335] Engine 000: Avg prompt throughput: {pt:.1f} tokens/s, "
    "Avg generation throughput: {gt:.1f} tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {kv:.1f}%, "
    "Prefix cache hit rate: 61.0%\n"
)
DEBUG = "(Worker_TP{rank} pid={pid}) DEBUG 12-02 {t} [shm_broadcast.py:520] dequeue step {i} in {us} us\n"
OOM = (
    "(Worker_TP{rank} pid={pid}) ERROR 12-02 {t} [multiproc_executor.py:671] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU {rank} has a total capacity of 79.19 GiB of which 1.10 GiB is free.\n"
)
STARTUP = (
    "(APIServer pid=4100) INFO 12-02 10:00:00 [api_server.py:1800] vLLM API server version 0.32.0\n"
    "(Worker_TP{rank} pid={pid}) INFO 12-02 10:01:00 [gpu_model_runner.py:2602] Model loading took 70.10 GiB memory and 60.00 seconds\n"
    "(Worker_TP{rank} pid={pid}) INFO 12-02 10:02:00 [gpu_worker.py:298] Available KV cache memory: 2.50 GiB\n"
    "(APIServer pid=4100) INFO 12-02 10:03:00 [launcher.py:60] Starting vLLM server on http://0.0.0.0:8000\n"
)


def clock(i: int) -> str:
    s = 3 * 3600 + i // 50  # ~50 lines a second from 13:00:00
    return f"{10 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def write_rank(path: Path, rank: int, target_bytes: int, with_oom: bool) -> None:
    pid = 5000 + rank
    with open(path, "w", buffering=1 << 20) as fh:
        fh.write(STARTUP.format(rank=rank, pid=pid))
        written, i, batch = 0, 0, []
        while written < target_bytes:
            t = clock(i)
            if i % 500 == 0:
                line = STATS.format(t=t, pt=1200.5, gt=480.2, r=40 + i % 20, kv=40 + i % 50)
            elif i % 3 == 0:
                line = DEBUG.format(rank=rank, pid=pid, t=t, i=i, us=i % 997)
            else:
                line = ACCESS.format(a=i % 250, p=30000 + i % 30000)
            batch.append(line)
            written += len(line)
            i += 1
            if with_oom and written > target_bytes * 0.97 and i % 7 == 0:
                batch.append(OOM.format(rank=rank, pid=pid, t=t))
                with_oom = False
            if len(batch) >= 20000:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))


def ere(words: tuple[str, ...]) -> str:
    return "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", w) for w in words)


def timed(cmd: list[str], out: Path) -> float:
    t0 = time.perf_counter()
    with open(out, "wb") as fh:
        subprocess.run(cmd, stdout=fh, check=False)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--keep", type=Path, help="write the log folder here and keep it")
    args = ap.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="oomkit-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    per_rank = int(args.gib * (1 << 30) / args.ranks)
    t0 = time.perf_counter()
    files = []
    for rank in range(args.ranks):
        p = folder / f"rank{rank}.log"
        if not p.exists() or p.stat().st_size < per_rank:
            write_rank(p, rank, per_rank, with_oom=rank == args.ranks - 1)
        files.append(str(p))
    size = sum(os.path.getsize(f) for f in files)
    print(f"log: {size / (1 << 30):.2f} GiB in {args.ranks} files ({time.perf_counter() - t0:.0f} s to write)")
    for f in files:  # warm the page cache so both readers see the same disk state
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=False)
    out = Path(tempfile.mkdtemp(prefix="oomkit-speed-out-"))  # outside the log folder oomkit reads
    grep_s = timed(["grep", "-a", "-n", "-E", ere(KEYWORDS), *files], out / "grep.out")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    oomkit_s = timed([sys.executable, "-m", "oomkit", "triage", str(folder), "--json"], out / "oomkit.json")
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    verdict = json.loads((out / "oomkit.json").read_text())["verdict"]
    shutil.rmtree(out, ignore_errors=True)
    print(f"reference grep -E: {grep_s:.2f} s")
    print(
        f"oomkit triage ({engine_name()} prefilter): {oomkit_s:.2f} s, peak RSS {rss_mb:.0f} MB"
        f"{'' if rss_mb > before / 1024 else ' (max of children)'}"
    )
    print(f"ratio oomkit/grep: {oomkit_s / grep_s:.2f}x (goal <= 3x); RSS goal <= 200 MB")
    print(
        f"verdict: {verdict['phase']} ({verdict['confidence']}), evidence {verdict['evidence'][0]['file']}:{verdict['evidence'][0]['line']}"
    )
    ok = verdict["phase"] == "serving_prefill" or verdict["phase"] == "serving_decode"
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
