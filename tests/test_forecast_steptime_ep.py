"""The roofline of engines in lockstep with expert parallelism (DP+EP of an MoE model): attention and
dense layers per engine, the experts over all dp x tp ranks, so every GPU runs its share of the
experts for the tokens of all engines and reads the experts they route to. No vLLM needed: only the
planner and the step-time model."""

import dataclasses

import pytest

from oomkit.forecast.steptime import StepLoad, roofline
from oomkit.plan import PlanRequest, plan

PREFILL = StepLoad(decode_seqs=0, prefill_tokens=8192, context_tokens=40_000, attention_pairs=8192 * 36_000)
DECODE = StepLoad(decode_seqs=8, prefill_tokens=0, context_tokens=8 * 40_000, attention_pairs=8 * 40_000)


@pytest.fixture(scope="module")
def dep16():
    return roofline(plan(PlanRequest(model="kimi-k3", gpu="GB300", dp=16, ep=True)))


@pytest.fixture(scope="module")
def tp8():
    return roofline(plan(PlanRequest(model="kimi-k3", gpu="GB300", tp=8)))


def _linear_s(model, load: StepLoad, expert_tokens: float) -> float:
    dense = model.active_params - model.expert_active_params
    return 2 * (dense * load.tokens + model.expert_active_params * expert_tokens) / model.flops_per_s


def test_an_engines_prefill_spreads_its_expert_work_over_every_rank(dep16):
    assert dep16.ep_ranks == 16 and dep16.tp == 1 and dep16.expert_active_params > 0
    spread = _linear_s(dep16, PREFILL, PREFILL.tokens / 16)
    on_one_gpu = _linear_s(dep16, PREFILL, PREFILL.tokens)
    attention_s = dep16.attention_flops_per_pair * PREFILL.attention_pairs / dep16.flops_per_s
    expected = 0.002 + spread + attention_s + dep16._collectives_s(PREFILL.tokens)
    assert dep16.step_s(PREFILL) == pytest.approx(expected, rel=1e-9)
    assert dep16.step_s(PREFILL) < expected - spread + on_one_gpu - 0.1  # the old pricing: all on one GPU


def test_engines_decoding_together_read_the_experts_all_their_tokens_route_to(dep16):
    alone, together = dep16.step_s(DECODE), dep16.group_step_s([DECODE] * 16)
    touched_alone = 1 - (1 - 16 / 896) ** DECODE.tokens
    touched_group = 1 - (1 - 16 / 896) ** (16 * DECODE.tokens)
    extra_s = dep16.expert_weight_bytes * (touched_group - touched_alone) / dep16.hbm_bytes_per_s
    assert together == pytest.approx(alone + extra_s, rel=1e-6)


def test_lockstep_lasts_as_long_as_the_slowest_engine(dep16):
    group = dep16.group_step_s([DECODE, PREFILL, DECODE])
    assert group == pytest.approx(max(dep16._engine_s(x, 8192 + 16) for x in (DECODE, PREFILL)))
    assert group > dep16.group_step_s([DECODE, DECODE, DECODE])


def test_without_expert_parallelism_each_engine_prices_its_own_tokens(tp8):
    assert tp8.ep_ranks == 1
    assert tp8.group_step_s([DECODE, PREFILL]) == max(tp8.step_s(DECODE), tp8.step_s(PREFILL))
    no_ep_dp = dataclasses.replace(tp8, tp=1)  # DP of an MoE model without EP: experts per engine
    assert no_ep_dp.group_step_s([DECODE] * 16) == no_ep_dp.step_s(DECODE)
