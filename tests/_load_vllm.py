"""Start a real vLLM CPU server on the testbed model for the load tests (the `--url` path: the
test owns the server, oomkit only gets its URL). Follows shared/research/cpu-testbed.md §0/§10:
module entry point, explicit --gpu-memory-utilization, --enforce-eager with explicit KV bytes
(ready in about 30 s), 127.0.0.1 only, stop by SIGTERM to its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx

READY_TIMEOUT_S = 300
# 2 MiB of KV at 1 KiB per token (2 layers x 2 KV heads x 64 x K,V x bf16) = 2,048 tokens: 16
# blocks of 128, so eight 600-token agent requests cannot all stay resident (preemptions).
SMALL_KV_ARGS = (
    "--max-model-len",
    "1024",
    "--dtype",
    "bfloat16",
    "--gpu-memory-utilization",
    "0.3",
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    "2097152",
    "--max-num-seqs",
    "8",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
)
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def testbed_model() -> Path:
    from oomkit.testbed.model import default_model_dir

    return default_model_dir("llama")


def vllm_argv(model: Path, port: int, args: tuple[str, ...] = SMALL_KV_ARGS) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        *args,
    ]


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"vLLM exited with {proc.returncode} before ready; see {log}:\n"
                + log.read_text(errors="replace")[-3000:]
            )
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"vLLM not ready within {READY_TIMEOUT_S} s; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    import psutil

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    for p in tree:
        with contextlib.suppress(psutil.Error):
            if p.is_running():
                p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def vllm_server(workdir: Path, args: tuple[str, ...] = SMALL_KV_ARGS) -> Iterator[SimpleNamespace]:
    port = free_port()
    log = workdir / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            vllm_argv(testbed_model(), port, args),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **ENV},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        _pin_engine_core(proc.pid)
        yield SimpleNamespace(url=url, proc=proc, log=log, pid=proc.pid)
    finally:
        stop(proc)


def _pin_engine_core(pid: int) -> None:
    """As the testbed profiles do (engine_core_cpus: [0], oomkit.launch.affinity): the EngineCore's
    spin-wait beside its worker, so the API server streams instead of sending answers in bursts, which
    delays the client's next requests until too few overlap to preempt."""
    import psutil

    from oomkit.launch.affinity import pin_engine_cores
    from oomkit.testbed.profiles import ENGINE_CORE_CPUS

    root = psutil.Process(pid)
    pinning = pin_engine_cores([root, *root.children(recursive=True)], tuple(ENGINE_CORE_CPUS))
    if pinning.reason:
        print(f"engine core not pinned: {pinning.reason}", file=sys.stderr)


if __name__ == "__main__":  # manual use: python tests/_load_vllm.py <dir>  (Ctrl-C stops it)
    with vllm_server(Path(sys.argv[1])) as s:
        print(s.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while s.proc.poll() is None:
                time.sleep(1)
