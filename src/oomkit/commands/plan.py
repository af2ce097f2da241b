"""`oomkit plan`: predict vLLM's memory per GPU for a model, GPU and layout. Flag names follow
vLLM's; this module only parses them, calls oomkit.plan.run_plan and prints."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from oomkit.errors import UsageError
from oomkit.fsio import dumps
from oomkit.plan.core import PlanRequest
from oomkit.plan.run import catalogs, run_plan
from oomkit.redact import redact, redact_obj
from oomkit.serial import JsonObject

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[KMGT])?\s*$", re.I)
_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def _bytes(_ctx: object, _param: object, value: str | None) -> int | None:
    if value is None:
        return None
    m = _SIZE.match(value)
    if not m:
        raise click.BadParameter(f"{value!r} is not a byte count (e.g. 67108864, 4GiB, 20G)")
    unit = (m.group(2) or "").lower().rstrip("b")
    return int(float(m.group(1)) * _UNITS[unit])


def max_len_option(_ctx: object, _param: object, value: str | None) -> int | None:
    """--max-model-len: an integer (commas and underscores allowed) or auto / -1 (vLLM's auto-fit)."""
    if value is None:
        return None
    if value.lower() in ("auto", "-1"):
        return -1
    try:
        return int(value.replace(",", "").replace("_", ""))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a length (an integer, or auto)") from None


def _counts(_ctx: object, _param: object, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give a GPU count or a comma list like 8,16") from None


def _assume(_ctx: object, _param: object, values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in values:
        name, sep, num = item.partition("=")
        try:
            out[name.strip()] = float(num)
        except ValueError:
            raise click.BadParameter(f"{item!r}: write NAME=NUMBER, e.g. other_gib=0.8") from None
        if not sep:
            raise click.BadParameter(f"{item!r}: write NAME=NUMBER")
    return out


@click.command("plan")
@click.option("--model", help="Catalog name (see --list), a model directory, or a config.json.")
@click.option("--gpu", help="GPU name from the catalog (see --list), or any name with --gpu-memory-gib.")
@click.option("--gpus", callback=_counts, help="GPU count; with --compare a comma list (8,16).")
@click.option("--tp", "--tensor-parallel-size", "tp", type=int, help="Tensor parallel size.")
@click.option("--pp", "--pipeline-parallel-size", "pp", type=int, help="Pipeline parallel size.")
@click.option("--dp", "--data-parallel-size", "dp", type=int, help="Attention data parallel size.")
@click.option("--ep", "--enable-expert-parallel", "ep", is_flag=True, help="Expert parallel over TP x DP ranks.")
@click.option("--dcp", "--decode-context-parallel-size", "dcp", type=int, help="Decode context parallel size.")
@click.option("--eplb-redundant-experts", type=int, default=0, show_default=True, help="EPLB redundant experts.")
@click.option("--max-model-len", callback=max_len_option, help="Context length (or auto, as in vLLM).")
@click.option("--max-num-seqs", type=int)
@click.option("--max-num-batched-tokens", type=int)
@click.option("--gpu-memory-utilization", type=float)
@click.option("--kv-cache-memory-bytes", callback=_bytes, help="KV pool per GPU; skips the budget (4GiB, 67108864).")
@click.option("--num-gpu-blocks-override", type=int)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--quantization", "-q", help="Weight quantization (fp8, awq, gptq, int4, int8, mxfp4, nvfp4).")
@click.option("--block-size", type=int)
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=None)
@click.option("--num-speculative-tokens", type=int, default=0, show_default=True)
@click.option("--use-replayssm", is_flag=True, help="vLLM 0.34: no per-draft state slots for linear attention.")
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs.")
@click.option("--mamba-ssm-cache-dtype", help="Recurrent-state dtype (float32, bfloat16).")
@click.option("--vllm-version", help="vLLM version whose accounting to follow (default 0.34).")
@click.option("--context", type=int, help="Target: tokens per request.")
@click.option("--concurrency", type=int, help="Target: concurrent requests.")
@click.option("--gpu-memory-gib", type=float, help="Device memory in GiB (unknown GPUs, CPU backend).")
@click.option("--assume", multiple=True, callback=_assume, help="Override an estimate: NAME=VALUE (see --json).")
@click.option("--hf-overrides", help="JSON merged into the model config, as vLLM's --hf-overrides.")
@click.option("--compare", is_flag=True, help="Rank the layouts possible for the --gpus counts.")
@click.option("--from-log", "from_log", multiple=True, type=click.Path(), help="Calibrate against a real startup log.")
@click.option("--list", "list_catalogs", is_flag=True, help="List the built-in models and GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def command(**o: Any) -> None:  # click passes the options as keywords; their types are the options'
    """Predict vLLM's memory per GPU: weights, budget, KV pool, and whether it loads, fits one
    request, and fits a target of --concurrency x --context tokens."""
    if o["list_catalogs"]:
        _emit(catalogs(), bool(o["as_json"]))
        return
    if not o["model"]:
        raise UsageError("--model is required", hint="a catalog name (oomkit plan --list) or a config path")
    gpus = o["gpus"] or []
    if len(gpus) > 1 and not o["compare"]:
        raise UsageError("several --gpus counts need --compare")
    gpu = o["gpu"] or ("logged-gpu" if o["from_log"] else None)
    if gpu is None:
        raise UsageError("--gpu is required", hint="e.g. --gpu H100-80GB (oomkit plan --list)")
    overrides: JsonObject = {}
    if o["hf_overrides"]:
        try:
            loaded = json.loads(str(o["hf_overrides"]))
        except json.JSONDecodeError as err:
            raise UsageError(f"--hf-overrides is not JSON: {err}") from err
        if not isinstance(loaded, dict):
            raise UsageError("--hf-overrides must be a JSON object", hint="e.g. '{\"num_key_value_heads\": 8}'")
        overrides = loaded
    req = PlanRequest(
        model=str(o["model"]),
        gpu=gpu,
        gpus=None if o["compare"] else (gpus[0] if gpus else None),
        tp=o["tp"],
        pp=o["pp"],
        dp=o["dp"],
        ep=bool(o["ep"]),
        dcp=o["dcp"],
        eplb_redundant=int(o["eplb_redundant_experts"] or 0),
        max_model_len=o["max_model_len"],
        max_num_seqs=o["max_num_seqs"],
        max_num_batched_tokens=o["max_num_batched_tokens"],
        gpu_memory_utilization=o["gpu_memory_utilization"],
        kv_cache_memory_bytes=o["kv_cache_memory_bytes"],
        num_gpu_blocks_override=o["num_gpu_blocks_override"],
        kv_cache_dtype=str(o["kv_cache_dtype"]),
        quantization=o["quantization"],
        block_size=o["block_size"],
        enable_prefix_caching=o["enable_prefix_caching"],
        num_speculative_tokens=int(o["num_speculative_tokens"] or 0),
        use_replayssm=bool(o["use_replayssm"]),
        enforce_eager=bool(o["enforce_eager"]),
        vllm_version=o["vllm_version"],
        context=o["context"],
        concurrency=o["concurrency"],
        gpu_memory_gib=o["gpu_memory_gib"],
        mamba_ssm_cache_dtype=o["mamba_ssm_cache_dtype"],
        assume=dict(o["assume"]),
        hf_overrides=overrides,
    )
    if o["compare"] and not gpus:
        raise UsageError("--compare needs --gpus, e.g. --gpus 8,16")
    outcome = run_plan(req, compare_gpus=gpus if o["compare"] else None, from_log=list(o["from_log"]) or None)
    _emit(outcome, bool(o["as_json"]))


def _emit(outcome: object, as_json: bool) -> None:
    # JSON: redact values, not the text, so keys such as kv_bytes_per_token stay readable.
    if as_json:
        click.echo(dumps(redact_obj(outcome.data)))  # type: ignore[attr-defined]
    else:
        click.echo(redact(outcome.text))  # type: ignore[attr-defined]
