"""How many engine steps a measured run's requests took to prefill: each prompt replayed alone on
vLLM's own scheduler, built for the server that run measured (the launch profile in its manifest).

The calibration prices a request that ran alone as overhead + its prefill steps; a prompt longer
than one chunk pays one step's fixed cost per chunk. How a prompt is chunked is the scheduler's
business: `max_num_batched_tokens`, and for a hybrid model in align mode a chunk end at each
`cache_config.block_size` boundary (vLLM 0.32 `_mamba_block_aligned_split`; on CPU that is 128
tokens while its KV blocks are 256, forecast.engine._after_handshake). On the hybrid testbed, counting
one step per prompt put those extra fixed costs into the per-token slope (0.07 ms a token against 0.05
with the steps counted) and the forecast's TTFT 20-40% high. The replay asks vLLM instead of
restating its rule. A request's cached prefix is replayed as such: the same prefix is computed by
an earlier request first, so the hit is vLLM's own, at its hash-block granularity."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from oomkit.errors import OomkitError
from oomkit.forecast.engine import VLLM_DEFAULT_RETENTION, Engine, build_engine, runner_output
from oomkit.forecast.inputs import RETENTION_ARG, parse_retention, profile_fields
from oomkit.forecast.vllm_api import load_vllm, minor_of
from oomkit.launch.profile import recorded_profile
from oomkit.plan import PlanRequest, plan

MAX_REPLAY_STEPS = 10_000
TOKEN_ID_SPAN = 100_000  # replayed prompts draw their ids from 64 .. 64 + span (below the stand-in's vocabulary)


def prefill_steps(run_dir: Path, prompts: Sequence[tuple[int, int]]) -> tuple[list[int] | None, str]:
    """Steps to prefill each (prompt tokens, cached tokens), or None and why they could not be counted."""
    engine, why = _engine_of(run_dir)
    if engine is None:
        return None, why
    counted = [_replay(engine, n, prompt, cached) for n, (prompt, cached) in enumerate(prompts)]
    if any(c is None for c in counted):
        return None, "a prompt did not finish its prefill on the replayed scheduler"
    return [c for c in counted if c is not None], "prefill steps replayed on vLLM's scheduler for the run's profile"


def _engine_of(run_dir: Path) -> tuple[Engine | None, str]:
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, "the run has no readable manifest.json"
    try:
        prof = recorded_profile(manifest)
        if prof is None:
            return None, "the run's manifest has no launch profile (one step per prompt assumed)"
        api = load_vllm()
        fields = profile_fields(prof, str(run_dir / "manifest.json"))
        if not fields.get("gpu"):
            return None, "the run's profile names no GPU (one step per prompt assumed)"
        request = PlanRequest(**fields)
        p = plan(request if request.vllm_version else replace(request, vllm_version=minor_of(api.version)))
        retention = parse_retention(prof.arg(RETENTION_ARG, VLLM_DEFAULT_RETENTION), "the run's profile")
        return build_engine(p, retention), ""
    except (OomkitError, ValueError) as err:  # vLLM missing or different, a profile the planner refuses
        return None, f"the run's server could not be rebuilt ({err}); one step per prompt assumed"


def _replay(engine: Engine, n: int, prompt: int, cached: int) -> int | None:
    rng = random.Random(f"oomkit-prefill-{n}")
    ids = [64 + rng.randrange(TOKEN_ID_SPAN) for _ in range(max(1, prompt))]
    if 0 < cached < prompt:
        _run(engine, f"warm-{n}", [*ids[:cached], 64 + rng.randrange(TOKEN_ID_SPAN)], until_done=True)
    return _run(engine, f"replay-{n}", ids, until_done=False)


def _run(engine: Engine, req_id: str, ids: list[int], until_done: bool) -> int | None:
    """Steps until the prompt is computed (then the request is aborted), or until it finishes."""
    api, sched = engine.api, engine.scheduler
    params = api.sampling.SamplingParams(max_tokens=1, ignore_eos=True)
    request = api.request.Request(req_id, ids, params, None, arrival_time=0.0, block_hasher=engine.block_hasher)
    sched.add_request(request)
    for steps in range(1, MAX_REPLAY_STEPS + 1):
        out = sched.schedule()
        sched.update_from_output(out, runner_output(engine, sched, list(out.num_scheduled_tokens)))
        if not until_done and request.num_computed_tokens >= len(ids):
            sched.finish_requests([req_id], api.request.RequestStatus.FINISHED_ABORTED)
            return steps
        if until_done and request.is_finished():
            return steps
    sched.finish_requests([req_id], api.request.RequestStatus.FINISHED_ABORTED)
    return None
