"""What following a start costs: CPU seconds of the oomkit process (log follow + triage + memory
sampling + readiness polling) until vLLM is ready, against vLLM's start time. Target: under 5%.

    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/launch_overhead.py [--repeat N] [--bare]

--bare also starts the same command with nothing but Popen and a /health poll, to compare the
wall-clock start time with and without oomkit (noisy on a shared 2-core machine). --replay LOG
measures only the per-line cost of redaction + parsing + triage on a saved log, no server needed.
"""

from __future__ import annotations

import argparse
import io
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from oomkit.launch import launched, load_profile  # noqa: E402
from oomkit.launch.follow import LogFollower  # noqa: E402
from oomkit.launch.runner import free_port  # noqa: E402


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def with_oomkit(profile_path: Path, runs_dir: Path) -> dict[str, float]:
    with launched(profile_path, runs_dir=runs_dir) as server:
        pass
    overhead = server.run.manifest()["overhead"]
    lines = sum(1 for _ in open(server.log_path, encoding="utf-8"))
    return {
        "ready_s": overhead["ready_s"],
        "oomkit_cpu_s": overhead["oomkit_cpu_s_until_ready"],
        "ratio": overhead["ratio"],
        "log_lines": lines,
    }


def bare(profile_path: Path) -> float:
    """Popen + /health poll only: the start time vLLM has without oomkit watching."""
    import httpx

    profile = load_profile(profile_path)
    port = free_port(profile.host)
    began = time.monotonic()
    proc = subprocess.Popen(
        profile.argv(port),
        env=profile.server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        while proc.poll() is None:
            try:
                if httpx.get(f"http://{profile.host}:{port}/health", trust_env=False, timeout=2).status_code == 200:
                    return time.monotonic() - began
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"bare start exited with {proc.returncode}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def replay(log: Path) -> dict[str, float]:
    data = log.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        before = cpu_s()
        follower = LogFollower(io.BytesIO(data), Path(tmp) / "server.log", time.monotonic()).start()
        follower.join(60)
        spent = cpu_s() - before
    return {
        "lines": follower.lines,
        "cpu_s": round(spent, 4),
        "us_per_line": round(spent / max(follower.lines, 1) * 1e6, 1),
        "phases": len(follower.phases),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=REPO / "examples" / "testbed-healthy.yaml")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--bare", action="store_true", help="also time a start without oomkit")
    ap.add_argument("--replay", type=Path, help="only measure following this saved log")
    args = ap.parse_args()
    if args.replay:
        print(replay(args.replay))
        return
    print(f"{'run':>3} {'ready_s':>8} {'oomkit_cpu_s':>12} {'ratio':>7} {'log_lines':>9} {'bare_ready_s':>12}")
    with tempfile.TemporaryDirectory() as runs:
        for i in range(args.repeat):
            row = with_oomkit(args.profile, Path(runs))
            bare_s = f"{bare(args.profile):12.1f}" if args.bare else f"{'-':>12}"
            print(
                f"{i + 1:>3} {row['ready_s']:8.1f} {row['oomkit_cpu_s']:12.3f} {row['ratio']:7.2%} "
                f"{row['log_lines']:9d} {bare_s}"
            )
            verdict = "PASS" if row["ratio"] < 0.05 else "FAIL"
            print(f"    {verdict}: oomkit used {row['ratio']:.2%} of vLLM's start time in CPU (target < 5%)")


if __name__ == "__main__":
    main()
