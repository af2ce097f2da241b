"""Client scale-out: streamed tokens/s and client CPU per 1,000 tokens for one client process, N
client processes and N Ray actors, against the zero-work server of benchmarks/client_overhead.py
(it streams as fast as it can, so the clients are what is measured), and the records lost (0).

    .venv/bin/python benchmarks/client_scale.py                       # 2 clients, 256 streams
    .venv/bin/python benchmarks/client_scale.py --clients 4 --concurrency 512 --requests 2048

Each mode runs in a fresh process; its CPU is that process, its client processes and (for Ray) the
actor processes, sampled once the clients are up and again when the last stream has ended, so Ray's
and the pool's start-up are charged to no one. Prints the Ray path's overhead against local
processes at the same N (goal: <= 10%). On this 2-core machine the server shares the cores: read
the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from client_overhead import free_port, serve  # noqa: E402 - the same zero-work server

MODES = ("single", "processes", "ray")


def _cpu_s(pids: set[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _client_pids() -> set[int]:
    import psutil

    me = psutil.Process()
    pids = {me.pid} | {child.pid for child in me.children(recursive=True)}
    for proc in psutil.process_iter(["name", "cmdline"]):
        if "ClientActor" in (proc.info["name"] or "") or "ClientActor" in " ".join(proc.info["cmdline"] or []):
            pids.add(proc.pid)
    return pids


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
    pids = _client_pids()
    cpu0, t0 = _cpu_s(pids), time.perf_counter()

    async def agent() -> None:
        while left:
            records.append(await chat(left.pop()))

    await asyncio.gather(*(agent() for _ in range(concurrency)))
    wall_s, cpu_s = time.perf_counter() - t0, _cpu_s(pids) - cpu0
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=None, help="default: 4 x concurrency")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counters = (mp.Value("l", 0), mp.Value("l", 0), mp.Value("q", 0))
    port, ready = free_port(), mp.Event()
    server = mp.Process(target=serve, args=(port, *counters, ready, 8), daemon=True)
    server.start()
    ready.wait(10)
    url = f"http://127.0.0.1:{port}"
    requests = args.requests or 4 * args.concurrency
    try:
        rows = {
            mode: run_mode(
                mode, 1 if mode == "single" else args.clients, url, args.concurrency, requests, args.output_len
            )
            for mode in MODES
        }
    finally:
        server.terminate()
    overhead = rows["ray"]["cpu_s_per_1k_tokens"] / rows["processes"]["cpu_s_per_1k_tokens"] - 1
    rate_ratio = rows["ray"]["tokens_per_s"] / rows["processes"]["tokens_per_s"]
    if args.json:
        print(
            json.dumps(
                {
                    "clients": args.clients,
                    "concurrency": args.concurrency,
                    "modes": rows,
                    "ray_cpu_overhead": overhead,
                    "ray_rate_ratio": rate_ratio,
                },
                indent=2,
            )
        )
        return
    print(f"{'mode':<22} {'tokens/s':>9} {'CPU s/1k tok':>12} {'records':>8} {'lost':>5}")
    for mode, row in rows.items():
        name = mode if mode == "single" else f"{mode} x{args.clients}"
        print(
            f"{name:<22} {row['tokens_per_s']:>9.0f} {row['cpu_s_per_1k_tokens']:>12.4f} {row['records']:>8}"
            f" {row['lost']:>5}"
        )
    print(
        f"Ray vs local processes at N={args.clients}: CPU per token {overhead:+.1%} (goal <= +10%), "
        f"tokens/s {rate_ratio:.2f}x"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_run":
        mode, clients, url, conc, reqs, out_len = sys.argv[2:8]
        sys.path.insert(0, str(REPO / "src"))
        from oomkit.scaleout.clients import run_loop

        print(json.dumps(run_loop(_drive(mode, int(clients), url, int(conc), int(reqs), int(out_len)))))
    else:
        main()
