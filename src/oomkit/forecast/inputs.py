"""The plan a forecast runs on: from a launch profile (its vLLM args, flag names as vLLM spells
them) and/or the plan's own options; an option given on the command line wins over the profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from oomkit.errors import UsageError
from oomkit.forecast.engine import VLLM_DEFAULT_RETENTION
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
RETENTION_ARG = "prefix_cache_retention_interval"
"""A scheduler setting, not a plan one: ForecastRequest.prefix_cache_retention_interval."""
TESTBED_GPU = "CPU"
TESTBED_MEMORY_GIB = 16.0  # the CPU backend's KV pool comes from kv_cache_memory_bytes; this only sizes the budget


class PlanFields(TypedDict, total=False):
    """PlanRequest keywords that a profile or the command line gave (only those)."""

    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    ep: bool
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int
    num_gpu_blocks_override: int
    kv_cache_dtype: str
    quantization: str
    block_size: int
    enable_prefix_caching: bool
    enforce_eager: bool
    gpu_memory_gib: float
    vllm_version: str


def plan_request(profile: str | None, options: Mapping[str, object]) -> PlanRequest:
    """options: PlanRequest fields from the command line (None = not given)."""
    fields = _from_profile(profile) if profile else PlanFields()
    fields.update(_narrowed({k: v for k, v in options.items() if v is not None}, "the command line"))
    if not fields.get("model"):
        raise UsageError("give --model (a catalog name or a config path) or --profile PROFILE")
    if not fields.get("gpu"):
        raise UsageError("--gpu is required", hint="e.g. --gpu H100-80GB (oomkit plan --list)")
    return PlanRequest(**fields)


def _from_profile(path: str) -> PlanFields:
    return profile_fields(load_profile(path), path)


def profile_fields(prof: Profile, where: str) -> PlanFields:
    """PlanRequest fields from a profile (a file's, or the one a launch recorded in its manifest)."""
    raw: dict[str, object] = {"model": prof.resolved_model(create=True)}
    for flag, name in PROFILE_ARGS.items():
        value = prof.arg(flag)
        if value is not None:
            raw[name] = value
    if prof.model.startswith(TESTBED_PREFIX):  # the embedded testbed runs on vLLM's CPU backend
        raw.update(gpu=TESTBED_GPU, gpu_memory_gib=TESTBED_MEMORY_GIB)
    return _narrowed(raw, where)


def retention_of(profile: str | None) -> int | None:
    """The profile's --prefix-cache-retention-interval (`None`, spelled so in YAML, keeps checkpoints
    densely); vLLM's default when the profile sets none."""
    if not profile:
        return VLLM_DEFAULT_RETENTION
    return parse_retention(load_profile(profile).arg(RETENTION_ARG, VLLM_DEFAULT_RETENTION), profile)


def parse_retention(value: object, where: str) -> int | None:
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    number = _int(value, RETENTION_ARG, where)
    if number < 0:
        raise UsageError(f"{where}: {RETENTION_ARG} = {value!r}: a number of tokens >= 0, or None")
    return number


def _narrowed(raw: Mapping[str, object], where: str) -> PlanFields:
    """The given values as PlanRequest takes them (each field's type; `max_model_len: auto` is -1)."""
    r = _Reader(raw, where)
    out = PlanFields()
    if (text := r.text("model")) is not None:
        out["model"] = text
    if (text := r.text("gpu")) is not None:
        out["gpu"] = text
    if (text := r.text("kv_cache_dtype")) is not None:
        out["kv_cache_dtype"] = text
    if (text := r.text("quantization")) is not None:
        out["quantization"] = text
    if (text := r.text("vllm_version")) is not None:
        out["vllm_version"] = text
    if (flag := r.flag("ep")) is not None:
        out["ep"] = flag
    if (flag := r.flag("enable_prefix_caching")) is not None:
        out["enable_prefix_caching"] = flag
    if (flag := r.flag("enforce_eager")) is not None:
        out["enforce_eager"] = flag
    if (number := r.number("gpu_memory_utilization")) is not None:
        out["gpu_memory_utilization"] = number
    if (number := r.number("gpu_memory_gib")) is not None:
        out["gpu_memory_gib"] = number
    if (count := r.count("gpus")) is not None:
        out["gpus"] = count
    if (count := r.count("tp")) is not None:
        out["tp"] = count
    if (count := r.count("pp")) is not None:
        out["pp"] = count
    if (count := r.count("dp")) is not None:
        out["dp"] = count
    if (count := r.count("max_model_len")) is not None:
        out["max_model_len"] = count
    if (count := r.count("max_num_seqs")) is not None:
        out["max_num_seqs"] = count
    if (count := r.count("max_num_batched_tokens")) is not None:
        out["max_num_batched_tokens"] = count
    if (count := r.count("kv_cache_memory_bytes")) is not None:
        out["kv_cache_memory_bytes"] = count
    if (count := r.count("num_gpu_blocks_override")) is not None:
        out["num_gpu_blocks_override"] = count
    if (count := r.count("block_size")) is not None:
        out["block_size"] = count
    return out


class _Reader:
    """Typed reads of raw option values (YAML or the command line); a value that is not one is a
    usage error naming where it came from."""

    def __init__(self, raw: Mapping[str, object], where: str):
        self.raw, self.where = raw, where

    def text(self, key: str) -> str | None:
        return None if key not in self.raw else str(self.raw[key])

    def flag(self, key: str) -> bool | None:
        return None if key not in self.raw else bool(self.raw[key])

    def number(self, key: str) -> float | None:
        return None if key not in self.raw else _float(self.raw[key], key, self.where)

    def count(self, key: str) -> int | None:
        if key not in self.raw:
            return None
        value = self.raw[key]
        if key == "max_model_len" and str(value).lower() in ("auto", "-1"):
            return -1  # vLLM's auto-fit
        return _int(value, key, self.where)


def _int(value: object, key: str, where: str) -> int:
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            return int(value)
        except ValueError:
            pass
    raise UsageError(f"{where}: args.{key} = {value!r} is not a number")


def _float(value: object, key: str, where: str) -> float:
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            pass
    raise UsageError(f"{where}: args.{key} = {value!r} is not a number")
