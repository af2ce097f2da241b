"""Triage speed on large multi-rank logs, against grep -E with the same key, and peak memory.

    python benchmarks/triage_speed.py [--case stats|chatter|mixed|all] [--ranks 8] [--mb 40]
                                      [--repeat 3] [--small] [--keep DIR] [--envelope none|docker|cri|gcloud]

Cases (one file per rank, one CUDA OOM near the end of one rank; the verdict must name it):
  stats    every third line an engine stats line (a long-running server), the rest access and
           debug lines: the worst case for a reader that looks at stats lines one by one;
  chatter  one stats line per 101 lines, the rest request and scheduler debug lines that all
           contain "tokens" (what a generic keyword prefilter lets through);
  mixed    access lines, a stats line per 500, worker debug chatter (the earlier benchmark).
For each case, in this shell, the best of --repeat runs of
  reference: `grep -a -n -E KEY FILES > out`, KEY being oomkit's own prefilter in ERE (grep -E
             with oomkit's key reads the same lines); also grep with the old generic key list,
             the fastest grep here, for scale;
  oomkit:    `python -m oomkit triage FOLDER --json` (a subprocess; peak RSS is the largest of
             its processes, workers included).
Goals (issue 13): stats <= 3x grep, chatter <= 1.5x, RSS <= 200 MB. OOMKIT_PREFILTER=re runs the
fallback without RE2. --small (8 ranks x 2 MB) is the case CI runs. --envelope writes each line as a node's
files hold a container's log: Docker's json-file records (unwrapped a block at a time before the key runs) or CRI's
"<time> stderr F " stamp; `gcloud` writes each rank as `gcloud logging read --format=json` exports it (one JSON
array of entries, newest first, which the reader parses as it reads and puts in time order). The goals are the plain
files'. Exit 1 when a verdict is wrong.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oomkit.triage.fast import engine_name
from oomkit.triage.prefilter import KEY_ERE

# The generic keyword list oomkit keyed on before issue 13 (kept only as a grep reference).
OLD_KEYWORDS_ERE = (
    "rror|RROR|emory|KV cache|ngine|oading|load model|load_|weights format|raph|tart|ersion|args|imeout|"
    "imed out|Killed|killed|KILL|OOMKill|oom-kill|oom_reaper|xit code|died|reempt|swap|NCCL|nccl|Gloo|gloo|"
    'orld|ompil|blocks|oncurrency|model len|max_model_len|ength|block size|File "|Traceback|xception|hut|'
    "fault|dumped|tokens|took|takes|throughput|Added request|Received request"
)
STATS = (
    "(APIServer pid=4100) INFO 12-02 {t} [loggers.py:335] Engine 000: Avg prompt throughput: {pt:.1f} tokens/s, "
    "Avg generation throughput: 480.2 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {kv:.1f}%, "
    "Prefix cache hit rate: 61.0%\n"
)
ACCESS = '(APIServer pid=4100) INFO:     10.1.0.{a}:{p} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
DEBUG = "(Worker_TP{rank} pid={pid}) DEBUG 12-02 {t} [shm_broadcast.py:520] dequeue step {i} in {us} us\n"
SCHED = "(EngineCore_DP0 pid=4200) DEBUG 12-02 {t} [core.py:812] scheduled {n} new tokens for {r} requests, {c} cached tokens\n"
REQUEST = (
    "(APIServer pid=4100) INFO 12-02 {t} [logger.py:43] Received request chatcmpl-{i:08x}: prompt: '<|im_start|>user\\n"
    "Summarise the following {i} tokens of context please', params: SamplingParams(n=1, temperature=0.7, top_p=1.0, "
    "max_tokens={mt}, min_tokens=0, skip_special_tokens=True), prompt_token_ids: None, lora_request: None.\n"
)
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
    seconds = 3 * 3600 + i // 50  # ~50 lines a second from 13:00:00
    return f"{10 + seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def line_for(case: str, i: int, rank: int, pid: int) -> str:
    t = clock(i)
    stats = STATS.format(t=t, pt=1200.5, r=40 + i % 20, w=i % 3, kv=40 + i % 50)
    if case == "stats":
        return (
            stats
            if i % 3 == 0
            else ACCESS.format(a=i % 250, p=30000 + i % 30000)
            if i % 3 == 1
            else SCHED.format(t=t, n=i % 4096, r=i % 64, c=i % 999)
        )
    if case == "chatter":
        return (
            stats
            if i % 101 == 0
            else REQUEST.format(t=t, i=i, mt=512 + i % 512)
            if i % 2
            else SCHED.format(t=t, n=i % 4096, r=i % 64, c=i % 999)
        )
    if i % 500 == 0:
        return stats
    return (
        DEBUG.format(rank=rank, pid=pid, t=t, i=i, us=i % 997)
        if i % 3 == 0
        else ACCESS.format(a=i % 250, p=30000 + i % 30000)
    )


def enveloped(line: str, envelope: str) -> str:
    if envelope == "docker":
        record = {"log": line, "stream": "stderr", "time": "2026-12-02T10:00:00.000000001Z"}
        return json.dumps(record, separators=(",", ":")) + "\n"  # as Docker writes: compact
    if envelope == "cri":
        return "2026-12-02T10:00:00.000000001Z stderr F " + line
    return line


def write_rank(path: Path, case: str, rank: int, target_bytes: int, with_oom: bool, envelope: str = "none") -> None:
    if envelope == "gcloud":
        write_gcloud(path, case, rank, target_bytes, with_oom)
        return
    pid = 5000 + rank
    with open(path, "w", buffering=1 << 20) as fh:
        fh.write("".join(enveloped(line, envelope) for line in STARTUP.format(rank=rank, pid=pid).splitlines(True)))
        written, i, batch = 0, 0, []
        while written < target_bytes:
            line = enveloped(line_for(case, i, rank, pid), envelope)
            batch.append(line)
            written += len(line)
            i += 1
            if with_oom and written > target_bytes * 0.97:
                batch.append(enveloped(OOM.format(rank=rank, pid=pid, t=clock(i)), envelope))
                with_oom = False
            if len(batch) >= 20000:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))


def gcloud_entry(line: str, i: int) -> str:
    """One LogEntry as `gcloud logging read --format=json` prints it (two-space indent), stamped i ms after 10:00."""
    stamp = f"2026-12-02T{10 + i // 3_600_000:02d}:{i // 60_000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}000000Z"
    entry = {
        "insertId": f"{i:012x}",
        "logName": "projects/p/logs/stderr",
        "receiveTimestamp": stamp,
        "resource": {"labels": {"container_name": "vllm", "pod_name": "vllm-0"}, "type": "k8s_container"},
        "severity": "ERROR",
        "textPayload": line.rstrip("\n"),
        "timestamp": stamp,
    }
    return "  " + json.dumps(entry, indent=2).replace("\n", "\n  ")


def write_gcloud(path: Path, case: str, rank: int, target_bytes: int, with_oom: bool) -> None:
    """The rank's log as one gcloud JSON export: an array of entries, newest first (gcloud's default order), so the
    reader must hold and reverse every entry before the markers come before the error."""
    pid = 5000 + rank
    entries = [gcloud_entry(line, i) for i, line in enumerate(STARTUP.format(rank=rank, pid=pid).splitlines(True))]
    written, i = sum(map(len, entries)), 0
    while written < target_bytes:
        entries.append(gcloud_entry(line_for(case, i, rank, pid), len(entries)))
        written += len(entries[-1]) + 2
        i += 1
        if with_oom and written > target_bytes * 0.97:
            entries.append(gcloud_entry(OOM.format(rank=rank, pid=pid, t=clock(i)), len(entries)))
            with_oom = False
    with open(path, "w", buffering=1 << 20) as fh:
        fh.write("[\n" + ",\n".join(reversed(entries)) + "\n]\n")


def best_of(cmd: list[str], out: Path, repeat: int) -> tuple[float, float]:
    """Best wall time of `repeat` runs, and the peak RSS (MB) of the command's own process tree:
    wait4 gives that child's usage and its reaped workers', not the other commands' of this script."""
    times, rss_mb = [], 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        with open(out, "wb") as fh:  # a file, not /dev/null: GNU grep stops at the first match there
            proc = subprocess.Popen(cmd, stdout=fh)
            _pid, _status, usage = os.wait4(proc.pid, 0)
            proc.returncode = 0  # reaped here: keep Popen from waiting again
        times.append(time.perf_counter() - started)
        rss_mb = max(rss_mb, usage.ru_maxrss / 1024)  # Linux: KiB
    return min(times), rss_mb


def run_case(case: str, folder: Path, args: argparse.Namespace) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    per_rank = int(args.mb * (1 << 20))
    files = []
    for rank in range(args.ranks):
        path = folder / f"rank{rank}.log"
        if not path.exists() or path.stat().st_size < per_rank:
            # In a fresh interpreter: the memory a rank's entries take is not this process's, so the commands it
            # starts later (forked from it) report their own peak RSS, not the generator's.
            writer = multiprocessing.get_context("spawn").Process(
                target=write_rank, args=(path, case, rank, per_rank, rank == args.ranks - 1, args.envelope)
            )
            writer.start()
            writer.join()
        files.append(str(path))
    size_mb = sum(os.path.getsize(f) for f in files) / (1 << 20)
    for f in files:  # warm the page cache so every reader sees the same disk state
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=False)
    out = Path(tempfile.mkdtemp(prefix="oomkit-speed-out-"))  # outside the log folder oomkit reads
    oomkit_s, rss_mb = best_of(
        [sys.executable, "-m", "oomkit", "triage", str(folder), "--json"], out / "oomkit.json", args.repeat
    )
    verdict = json.loads((out / "oomkit.json").read_text())["verdict"]
    grep_s, grep_rss_mb = best_of(["grep", "-a", "-n", "-E", KEY_ERE, *files], out / "grep.out", args.repeat)
    grep_old_s, _ = best_of(["grep", "-a", "-n", "-E", OLD_KEYWORDS_ERE, *files], out / "grep-old.out", args.repeat)
    shutil.rmtree(out, ignore_errors=True)
    goal = {"stats": 3.0, "chatter": 1.5}.get(case, 3.0)
    ratio = oomkit_s / grep_s
    evidence = verdict["evidence"][0] if verdict["evidence"] else {"file": "-", "line": 0}
    ok = verdict["phase"] in ("serving_prefill", "serving_decode") and evidence["file"].endswith(
        f"rank{args.ranks - 1}.log"
    )
    wrapped = {"none": "", "gcloud": ", each rank a gcloud JSON export (newest first)"}.get(
        args.envelope, f", each line in a {args.envelope} envelope"
    )
    print(f"[{case}] {size_mb:.0f} MB in {args.ranks} files{wrapped}, best of {args.repeat}")
    print(
        f"  grep -E, oomkit's key:  {grep_s:.2f} s, peak RSS {grep_rss_mb:.0f} MB"
        f"   (grep -E, the old generic keywords: {grep_old_s:.2f} s)"
    )
    print(f"  oomkit triage ({engine_name()}): {oomkit_s:.2f} s, peak RSS {rss_mb:.0f} MB")
    print(
        f"  ratio oomkit/grep: {ratio:.2f}x ({_judged(ratio, goal)}); "
        f"vs the old-key grep {oomkit_s / grep_old_s:.2f}x; RSS goal <= 200 MB: {'met' if rss_mb <= 200 else 'NOT met'}"
    )
    print(
        f"  verdict: {verdict['phase']} ({verdict['confidence']}), evidence {evidence['file']}:{evidence['line']} {'ok' if ok else 'WRONG'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["stats", "chatter", "mixed", "all"], default="all")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=40.0, help="MB per rank file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="8 ranks x 2 MB, one run: the CI case")
    ap.add_argument("--keep", type=Path, help="write the log folders here and keep them")
    ap.add_argument(
        "--envelope",
        choices=["none", "docker", "cri", "gcloud"],
        default="none",
        help="wrap each line as a node keeps it, or write each rank as a gcloud JSON export",
    )
    args = ap.parse_args(argv)
    if args.small:
        args.ranks, args.mb, args.repeat = 8, 2.0, 1
    root = args.keep or Path(tempfile.mkdtemp(prefix="oomkit-speed-"))
    cases = ["stats", "chatter", "mixed"] if args.case == "all" else [args.case]
    print(
        f"prefilter: {engine_name()} (OOMKIT_PREFILTER={os.environ.get('OOMKIT_PREFILTER', 'unset')}), {os.cpu_count()} cores"
    )
    results = [
        run_case(case, root / (case if args.envelope == "none" else f"{case}-{args.envelope}"), args) for case in cases
    ]
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(results) else 1


def _judged(ratio: float, goal: float) -> str:
    """The goal is RE2's: the `re` fallback (OOMKIT_PREFILTER=re, or RE2 missing) is measured, not judged."""
    if engine_name() != "re2":
        return f"the goal <= {goal:g}x is for RE2; this is the {engine_name()} fallback, measured only"
    return f"goal <= {goal:g}x: {'met' if ratio <= goal else 'NOT met'}"


if __name__ == "__main__":
    sys.exit(main())
