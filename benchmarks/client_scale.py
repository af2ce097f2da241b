"""Client scale-out: streamed tokens/s and client CPU per 1,000 tokens for one client process, N
client processes and N Ray actors, against the zero-work server of benchmarks/client_overhead.py
(it streams as fast as it can, so the clients are what is measured), and the records lost (0).

    .venv/bin/python benchmarks/client_scale.py                       # 2 clients, 256 streams
    .venv/bin/python benchmarks/client_scale.py --concurrency 64 --requests 256 --output-len 128
    .venv/bin/python benchmarks/client_scale.py --clients 4 --concurrency 512 --requests 2048

Each mode runs in a fresh process; its CPU is that process and everything under it (its client
processes; for Ray, the local instance's daemons and actor processes), sampled once the clients are
up and again when the last stream has ended, so Ray's and the pool's start-up are charged to no one.
The modes run back to back, `--repeats` rounds of them, so that Ray and local processes see the same
machine state; printed: each mode's median, and the Ray path's overhead against local processes at
the same N in every round, with the median and the spread (goal: <= 10%). On this 2-core machine
the server shares the cores: read the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from client_overhead import free_port, serve  # noqa: E402 - the same zero-work server

MODES = ("single", "processes", "ray")


def _cpu_s(me_first: bool) -> dict[int, float]:
    """CPU seconds of this process and of every process under it, by pid. Reading a dozen Ray
    processes' counters costs this process ~10 ms: read its own counter last when the window
    opens and first when it closes, so that the reading is not charged to the clients."""
    import psutil

    me = psutil.Process()
    children = [child.pid for child in me.children(recursive=True)]
    pids = [me.pid, *children] if me_first else [*children, me.pid]
    return {pid: cpu for pid in pids if (cpu := _process_cpu_s(pid)) is not None}


def _process_cpu_s(pid: int) -> float | None:
    """From the scheduler's nanosecond counters of each thread where Linux has them: a short-answer
    window lasts ~0.2 s, and the 10 ms ticks of `cpu_times()` on each of a dozen processes would
    be a large part of it."""
    import psutil

    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        pass  # not Linux, no schedstats, or the process or one of its threads just ended
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _cpu_since(before: dict[int, float]) -> float:
    """CPU spent since `before` by the processes alive now; one started since counts in full (a
    process that ended in between is missed: Ray may retire an idle worker)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in _cpu_s(me_first=True).items())


async def _drive(mode: str, clients: int, url: str, concurrency: int, requests: int, output_len: int) -> dict:
    from oomkit.client.chat import ChatClient, ChatRequest, ClientOptions
    from oomkit.scaleout.clients import Endpoint, PoolSpec, open_pool
    from oomkit.scaleout.ray_backend import RayTarget

    body = {
        "messages": [{"role": "user", "content": "Say something long."}],
        "max_tokens": output_len,
        "ignore_eos": True,
    }
    reqs = [ChatRequest(f"r{i}", body, "bench", i % concurrency, i // concurrency) for i in range(requests)]
    if mode == "single":
        async with ChatClient(url, "fake", options=ClientOptions()) as client:
            return await _window(client.chat, reqs, concurrency)
    spec = PoolSpec(clients, RayTarget("local", clients) if mode == "ray" else None)
    async with open_pool(spec, Endpoint(url, "fake", None, ClientOptions())) as pool:
        return await _window(pool.chat, reqs, concurrency)


async def _window(chat, reqs: list, concurrency: int) -> dict:
    left = list(reversed(reqs))
    records = []
    cpu0, t0 = _cpu_s(me_first=False), time.perf_counter()

    async def agent() -> None:
        while left:
            records.append(await chat(left.pop()))

    await asyncio.gather(*(agent() for _ in range(concurrency)))
    wall_s, cpu_s = time.perf_counter() - t0, _cpu_since(cpu0)
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens or 0 for r in ok)
    return {
        "requests": len(reqs),
        "records": len(records),
        "ok": len(ok),
        "lost": len(reqs) - len(records),
        "tokens": tokens,
        "wall_s": wall_s,
        "tokens_per_s": tokens / wall_s,
        "cpu_s_per_1k_tokens": 1000 * cpu_s / max(tokens, 1),
    }


def run_mode(mode: str, clients: int, url: str, concurrency: int, requests: int, output_len: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "RAY_DISABLE_USAGE_STATS": "1"}
    env.pop("RAY_ADDRESS", None)
    argv = [
        sys.executable,
        __file__,
        "--_run",
        mode,
        str(clients),
        url,
        str(concurrency),
        str(requests),
        str(output_len),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rounds(args: argparse.Namespace, url: str) -> list[dict[str, dict]]:
    """`--repeats` rounds of every mode, back to back."""
    requests = args.requests or 4 * args.concurrency
    return [
        {
            mode: run_mode(
                mode, 1 if mode == "single" else args.clients, url, args.concurrency, requests, args.output_len
            )
            for mode in MODES
        }
        for _ in range(args.repeats)
    ]


def _summary(rounds: list[dict[str, dict]]) -> dict:
    def ratios(key: str) -> list[float]:
        return [r["ray"][key] / r["processes"][key] for r in rounds]

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    modes = {
        mode: {key: statistics.median(r[mode][key] for r in rounds) for key in ("tokens_per_s", "cpu_s_per_1k_tokens")}
        | {"records": sum(r[mode]["records"] for r in rounds), "lost": sum(r[mode]["lost"] for r in rounds)}
        for mode in MODES
    }
    cpu = [v - 1 for v in ratios("cpu_s_per_1k_tokens")]
    return {"modes": modes, "ray_cpu_overhead": spread(cpu), "ray_rate_ratio": spread(ratios("tokens_per_s"))}


def _print(args: argparse.Namespace, rounds: list[dict[str, dict]], summary: dict) -> None:
    print(f"{args.repeats} rounds; per mode the median, with records and lost summed over the rounds")
    print(f"{'mode':<22} {'tokens/s':>9} {'CPU s/1k tok':>12} {'records':>8} {'lost':>5}")
    for mode, row in summary["modes"].items():
        name = mode if mode == "single" else f"{mode} x{args.clients}"
        print(
            f"{name:<22} {row['tokens_per_s']:>9.0f} {row['cpu_s_per_1k_tokens']:>12.4f} {row['records']:>8}"
            f" {row['lost']:>5}"
        )
    each = ", ".join(
        f"{r['ray']['cpu_s_per_1k_tokens'] / r['processes']['cpu_s_per_1k_tokens'] - 1:+.1%}" for r in rounds
    )
    cpu, rate = summary["ray_cpu_overhead"], summary["ray_rate_ratio"]
    print(
        f"Ray vs local processes at N={args.clients}: CPU per token {cpu['median']:+.1%} "
        f"(rounds: {each}; goal <= +10%), tokens/s {rate['median']:.2f}x ({rate['min']:.2f}-{rate['max']:.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=None, help="default: 4 x concurrency")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="rounds of every mode, back to back")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counters = (mp.Value("l", 0), mp.Value("l", 0), mp.Value("q", 0))
    port, ready = free_port(), mp.Event()
    server = mp.Process(target=serve, args=(port, *counters, ready, 8), daemon=True)
    server.start()
    ready.wait(10)
    try:
        rounds = _rounds(args, f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
    summary = _summary(rounds)
    if args.json:
        print(
            json.dumps(
                {"clients": args.clients, "concurrency": args.concurrency, "rounds": rounds, **summary}, indent=2
            )
        )
    else:
        _print(args, rounds, summary)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_run":
        mode, clients, url, conc, reqs, out_len = sys.argv[2:8]
        sys.path.insert(0, str(REPO / "src"))
        from oomkit.scaleout.clients import run_loop

        print(json.dumps(run_loop(_drive(mode, int(clients), url, int(conc), int(reqs), int(out_len)))))
    else:
        main()
