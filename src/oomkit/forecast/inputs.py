"""The plan a forecast runs on: from a launch profile (its vLLM args, flag names as vLLM spells
them) and/or the plan's own options; an option given on the command line wins over the profile."""

from __future__ import annotations

from typing import Any

from oomkit.errors import UsageError
from oomkit.launch.profile import TESTBED_PREFIX, Profile, load_profile
from oomkit.plan import PlanRequest

# vLLM flag (as a profile stores it) -> PlanRequest field.
PROFILE_ARGS = {
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "enable_expert_parallel": "ep",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "block_size": "block_size",
    "enable_prefix_caching": "enable_prefix_caching",
    "enforce_eager": "enforce_eager",
}
TESTBED_GPU = "CPU"
TESTBED_MEMORY_GIB = 16.0  # the CPU backend's KV pool comes from kv_cache_memory_bytes; this only sizes the budget


def plan_request(profile: str | None, options: dict[str, Any]) -> PlanRequest:
    """options: PlanRequest fields from the command line (None = not given)."""
    fields: dict[str, Any] = {}
    if profile:
        fields.update(_from_profile(profile))
    fields.update({k: v for k, v in options.items() if v is not None})
    if not fields.get("model"):
        raise UsageError("give --model (a catalog name or a config path) or --profile PROFILE")
    if not fields.get("gpu"):
        raise UsageError("--gpu is required", hint="e.g. --gpu H100-80GB (oomkit plan --list)")
    return PlanRequest(**fields)


def _from_profile(path: str) -> dict[str, Any]:
    return profile_fields(load_profile(path), path)


def profile_fields(prof: Profile, where: str) -> dict[str, Any]:
    """PlanRequest fields from a profile (a file's, or the one a launch recorded in its manifest)."""
    fields: dict[str, Any] = {"model": prof.resolved_model(create=True)}
    for flag, field in PROFILE_ARGS.items():
        value = prof.arg(flag)
        if value is not None:
            fields[field] = _coerce(field, value, where)
    if prof.model.startswith(TESTBED_PREFIX):  # the embedded testbed runs on vLLM's CPU backend
        fields.update(gpu=TESTBED_GPU, gpu_memory_gib=TESTBED_MEMORY_GIB)
    return fields


def _coerce(field: str, value: Any, path: str) -> Any:
    if field in ("ep", "enable_prefix_caching", "enforce_eager"):
        return bool(value)
    if field in ("kv_cache_dtype", "quantization"):
        return str(value)
    if field == "max_model_len" and str(value).lower() in ("auto", "-1"):
        return -1  # vLLM's auto-fit
    try:
        return float(value) if field == "gpu_memory_utilization" else int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{path}: args.{field} = {value!r} is not a number") from None
