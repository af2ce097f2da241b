"""`oomkit forecast`: the ladder's figures for a layout you may not have, from vLLM's own scheduler
driven on a virtual clock. This module only parses options, calls oomkit.forecast and prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from oomkit.commands.bench import duration_s
from oomkit.commands.options import ray_option
from oomkit.commands.plan import max_len_option
from oomkit.errors import UsageError
from oomkit.fsio import dumps
from oomkit.loadrun.stats import parse_slos
from oomkit.redact import redact, redact_obj
from oomkit.units import parse_size

if TYPE_CHECKING:
    from oomkit.scaleout.cells import Backend


def _levels(_ctx: object, _param: object, value: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x.replace("_", "")) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: give a comma list of session counts, e.g. 1,2,4,8") from None
    if not levels:
        raise click.BadParameter("give at least one concurrency, e.g. 1,2,4,8")
    return levels


def _size(_ctx: object, _param: object, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


def _window(_ctx: object, _param: object, value: str | None) -> float | None:
    try:
        return duration_s(value)
    except UsageError:
        raise click.BadParameter(f"{value!r}: expected seconds, or a number with s, m or h (e.g. 10m)") from None


PLAN_FIELDS = (
    "model",
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dp",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "kv_cache_dtype",
    "quantization",
    "block_size",
    "enable_prefix_caching",
    "gpu_memory_gib",
    "vllm_version",
)


@click.command("forecast")
@click.option("--profile", help="Launch profile YAML: its model and vLLM args set the plan (options below win).")
@click.option("--model", help="Catalog name (oomkit plan --list), a model directory, or a config.json.")
@click.option("--gpu", help="GPU name from the catalog (oomkit plan --list).")
@click.option("--gpus", type=int, help="GPU count (TP inside the NVLink domain, PP across).")
@click.option("--tp", "--tensor-parallel-size", "tp", type=int, help="Tensor parallel size.")
@click.option("--pp", "--pipeline-parallel-size", "pp", type=int, help="Pipeline parallel size.")
@click.option("--dp", "--data-parallel-size", "dp", type=int, help="Data parallel engines.")
@click.option("--ep", "--enable-expert-parallel", "ep", is_flag=True, default=None, help="Expert parallel.")
@click.option("--max-model-len", callback=max_len_option, help="Context length (or auto).")
@click.option("--max-num-seqs", type=int)
@click.option("--max-num-batched-tokens", type=int)
@click.option("--gpu-memory-utilization", type=float)
@click.option("--kv-cache-memory-bytes", callback=_size, help="KV pool per GPU (4GiB, 67108864).")
@click.option("--num-gpu-blocks-override", type=int)
@click.option("--kv-cache-dtype")
@click.option("--quantization", "-q")
@click.option("--block-size", type=int)
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=None)
@click.option(
    "--prefix-cache-retention-interval",
    "retention",
    metavar="N|None",
    help="Mamba/sliding-window prefix-cache checkpoints every N tokens (None: dense; default: the profile's, "
    "else vLLM's 0).",
)
@click.option("--gpu-memory-gib", type=float, help="Device memory in GiB (unknown GPUs).")
@click.option("--vllm-version", help="vLLM accounting the plan follows (default: the installed vLLM's).")
@click.option(
    "--layouts",
    help="Forecast each layout on the same traffic: tpN, tepN, ppN, dpN, depN joined by x, comma-separated "
    "(tp8,dep16,tp8xpp2). Replaces --tp/--pp/--dp/--ep.",
)
@click.option("--workload", help="Workload YAML, or a run's request-set.jsonl (exact measured sizes).")
@click.option("--concurrency", default="1,2,4,8", show_default=True, callback=_levels, help="Rungs: sessions at once.")
@click.option("--sessions", type=int, help="Instead of rungs: this many sessions (starts spread over --window).")
@click.option("--window", callback=_window, help="Spread the --sessions starts evenly over this long (10m, 90s).")
@click.option("--steps", "steps_per_session", type=int, help="Agent steps per session (default: the workload's).")
@click.option("--slo", "slos", multiple=True, metavar="NAME=MS", help="ttft_ms=, tpot_ms= or latency_ms= bound.")
@click.option("--calibrate", "calibrate_run", help="Fit the step time on this run folder (or run id).")
@click.option("--runs-dir", default="runs", show_default=True, help="Where run ids are looked up.")
@click.option("--no-refine", is_flag=True, help="Only the listed rungs: no bisection to the knee.")
@click.option(
    "--max-steps",
    type=int,
    default=2_000_000,
    show_default=True,
    help="Scheduler steps, all rungs (per layout in a sweep).",
)
@click.option(
    "--time-limit",
    "time_limit_s",
    type=float,
    default=600.0,
    show_default=True,
    help="Wall seconds (per layout in a sweep).",
)
@click.option(
    "--workers",
    type=int,
    help="Layouts of --layouts forecast at once, each in its own process (default: one per CPU core).",
)
@ray_option("the layouts of --layouts as tasks")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(**o: Any) -> None:  # click passes the options as keywords
    """Forecast the ladder on a layout: KV usage, preemptions, waiting, prefix-cache hits, TTFT/ITL
    and the knee per concurrency, from vLLM's own scheduler and KV-cache manager (installed vLLM,
    the forecast extra) with the plan's KV pool. Every figure printed is a forecast."""
    from oomkit.forecast import ForecastRequest, forecast, plan_request, render
    from oomkit.forecast.inputs import parse_retention, retention_of
    from oomkit.forecast.layouts import parse_layouts

    if o["gpus"] is not None and o["gpus"] < 1:
        raise UsageError("--gpus must be at least 1")
    plan_opts = {k: o[k] for k in PLAN_FIELDS}
    plan_opts["ep"] = o["ep"]
    layouts = parse_layouts(o["layouts"]) if o["layouts"] is not None else ()
    if layouts and any(plan_opts[k] for k in ("tp", "pp", "dp", "ep")):
        raise UsageError("--layouts sets TP, PP, DP and EP: drop --tp/--pp/--dp/--ep")
    req = ForecastRequest(
        plan=plan_request(o["profile"], plan_opts),
        workload=o["workload"],
        concurrency=o["concurrency"],
        sessions=o["sessions"],
        window_s=o["window"] or 0.0,
        steps_per_session=o["steps_per_session"],
        step_time="calibrated" if o["calibrate_run"] else "roofline",
        calibrate_run=o["calibrate_run"],
        runs_dir=o["runs_dir"],
        slos=parse_slos(o["slos"]),
        refine=not o["no_refine"],
        max_steps=o["max_steps"],
        time_limit_s=o["time_limit_s"],
        layouts=layouts,
        prefix_cache_retention_interval=(
            retention_of(o["profile"])
            if o["retention"] is None
            else parse_retention(o["retention"], "--prefix-cache-retention-interval")
        ),
    )
    result = forecast(req, _backend(o["workers"], o["ray_address"]))
    click.echo(dumps(redact_obj(result.to_dict())) if o["as_json"] else redact(render(result)))


def _backend(workers: int | None, ray_address: str | None) -> Backend:
    """Where the cells of a sweep run: local processes, or Ray when --ray is given (checked now, so
    a missing Ray is said before any forecast runs)."""
    from oomkit.scaleout.cells import Backend
    from oomkit.scaleout.ray_backend import RayTarget, import_ray

    if workers is not None and workers < 1:
        raise UsageError("--workers must be at least 1")
    if ray_address is None:
        return Backend(workers=workers)
    import_ray()
    return Backend(workers=workers, ray=RayTarget(ray_address or None))
