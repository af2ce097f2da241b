"""The factors an experiment may change, one per variant. Client-side factors change what is sent
to the same server; server-side factors are vLLM arguments, so changing one restarts vLLM."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CLIENT, SERVER = "client", "server"


@dataclass(frozen=True)
class Factor:
    name: str
    side: str
    """client (same server, other requests) or server (a vLLM argument: restart through launch)."""
    kind: type | tuple[type, ...]
    meaning: str
    source: str


FACTORS: tuple[Factor, ...] = (
    Factor(
        "concurrency",
        CLIENT,
        int,
        "agent sessions running at once",
        "the method's comparison (1): keep the cache, lower concurrency",
    ),
    Factor(
        "history_turns",
        CLIENT,
        int,
        "earlier agent steps kept in every prompt (0: none)",
        "the method's comparison (2): keep concurrency, shorten history",
    ),
    Factor(
        "context_factor",
        CLIENT,
        int,
        "every prompt's history repeated N times (longer context)",
        "same transformation as the ladder's history doubling (oomkit.loadrun.history.scaled)",
    ),
    Factor("output_tokens", CLIENT, int, "max_tokens of every request", "OpenAI chat API max_tokens"),
    Factor("max_model_len", SERVER, int, "--max-model-len", "vllm/config/model.py"),
    Factor("max_num_seqs", SERVER, int, "--max-num-seqs", "vllm/config/scheduler.py"),
    Factor("max_num_batched_tokens", SERVER, int, "--max-num-batched-tokens", "vllm/config/scheduler.py"),
    Factor(
        "enable_prefix_caching",
        SERVER,
        bool,
        "--enable-prefix-caching / --no-enable-prefix-caching",
        "vllm/config/cache.py",
    ),
    Factor(
        "prefix_cache_retention_interval",
        SERVER,
        (int, str),
        "--prefix-cache-retention-interval N|None (sliding-window and mamba/linear layers only)",
        "vllm/config/cache.py: int | None, default 0; cpu-testbed.md §5",
    ),
    Factor("gpu_memory_utilization", SERVER, float, "--gpu-memory-utilization", "vllm/config/cache.py"),
    Factor(
        "kv_cache_memory_bytes",
        SERVER,
        int,
        "--kv-cache-memory-bytes (the KV pool, exact)",
        "vllm/config/cache.py; the CPU testbed's stand-in for utilisation (cpu-testbed.md §0)",
    ),
    Factor("num_gpu_blocks_override", SERVER, int, "--num-gpu-blocks-override", "vllm/config/cache.py"),
    Factor("kv_cache_dtype", SERVER, str, "--kv-cache-dtype", "vllm/config/cache.py"),
    Factor("block_size", SERVER, int, "--block-size", "vllm/config/cache.py"),
    Factor("tensor_parallel_size", SERVER, int, "--tensor-parallel-size", "vllm/config/parallel.py"),
    Factor("pipeline_parallel_size", SERVER, int, "--pipeline-parallel-size", "vllm/config/parallel.py"),
    Factor("data_parallel_size", SERVER, int, "--data-parallel-size", "vllm/config/parallel.py"),
    Factor("enable_expert_parallel", SERVER, bool, "--enable-expert-parallel", "vllm/config/parallel.py"),
)
BY_NAME = {f.name: f for f in FACTORS}
# Names people write for a factor, and the factor they mean.
ALIASES = {
    "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "prefix_cache_retention_interval",
    "prefix-cache-retention-interval": "prefix_cache_retention_interval",
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dp": "data_parallel_size",
}
RETENTION = "prefix_cache_retention_interval"
RETENTION_ENV = "VLLM_PREFIX_CACHE_RETENTION_INTERVAL"


def canonical(name: str) -> str:
    """The factor name for what the user wrote (dashes or underscores, known aliases)."""
    plain = name.lstrip("-").replace("-", "_")
    return ALIASES.get(name) or ALIASES.get(plain) or plain


@dataclass(frozen=True)
class RetentionForms:
    """Which spelling of the retention interval a vLLM reads; all None when no vLLM was found."""

    flag: bool | None
    """Its CacheConfig has the field (the --prefix-cache-retention-interval flag)."""
    env: bool | None
    """Its envs.py reads an environment variable of that name."""
    checked: str | None
    """The vLLM package folder read."""


def retention_forms(vllm_dir: Path | None) -> RetentionForms:
    """Which spelling of the retention interval the installed vLLM reads: the CacheConfig field
    (the --prefix-cache-retention-interval flag) and/or an environment variable of that name."""
    if vllm_dir is None or not vllm_dir.is_dir():
        return RetentionForms(None, None, None)
    envs = vllm_dir / "envs.py"
    cache = vllm_dir / "config" / "cache.py"
    return RetentionForms(RETENTION in _text(cache), RETENTION_ENV in _text(envs), str(vllm_dir))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def installed_vllm_dir() -> Path | None:
    """vLLM's package folder in this interpreter, found without importing it (imports take seconds)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def retention_note(forms: RetentionForms) -> str:
    if forms.checked is None:
        return (
            f"{RETENTION_ENV} is not a variable vLLM 0.32 reads (vllm/envs.py has none); oomkit passes "
            "--prefix-cache-retention-interval instead (vLLM was not found here to check)"
        )
    if forms.env:
        return f"this vLLM reads the environment variable {RETENTION_ENV} ({forms.checked}/envs.py)"
    flag = "--prefix-cache-retention-interval" if forms.flag else "no retention setting at all"
    return f"this vLLM ({forms.checked}) has no {RETENTION_ENV} variable: it reads {flag}; oomkit passes the flag"
