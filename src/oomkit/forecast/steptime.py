"""How long one engine step takes: the forecast's clock. The scheduler decides what runs; this
module only prices it. `roofline` prices a step from the plan and the GPU catalog (bytes read over
HBM bandwidth against FLOPs over peak, plus TP/EP collectives and a per-step overhead); every
constant is stated in the output. `calibrated` (forecast.calibrate) is fitted on a measured run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from oomkit.errors import UsageError
from oomkit.plan import Plan
from oomkit.plan.weights import param_groups
from oomkit.serial import JsonObject, to_json_object

# Stated assumptions of the roofline (all in the JSON under step_time.assumptions).
HBM_EFFICIENCY = 0.8  # share of datasheet bandwidth a decode step reaches (memory-bound kernels)
MFU = 0.5  # share of dense peak FLOPs a prefill step reaches
STEP_OVERHEAD_MS = 2.0  # scheduler, input preparation, kernel launches with CUDA graphs
ALLREDUCE_LATENCY_US = 10.0  # one NCCL all-reduce of a small message inside an NVLink domain
ACTIVATION_BYTES = 2  # bf16 hidden states on the wire
# Dense BF16 tensor-core peak per GPU (datasheets, without sparsity). FP8/FP4 compute is faster and
# not modelled: prefill of a quantized model is priced at the BF16 peak (pessimistic).
PEAK_BF16_TFLOPS = {
    "H100-80GB": 989.0,
    "H200": 989.0,
    "B200": 2250.0,
    "B300": 2250.0,
    "GB200": 2500.0,
    "GB300": 2500.0,
    "MI300X": 1307.0,
    "MI355X": 2300.0,
    "A100-40GB": 312.0,
    "A100-80GB": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10": 125.0,
}
# NVLink / xGMI bandwidth per GPU, one direction, GB/s (NVLink 4: 900 GB/s total, NVLink 5: 1.8 TB/s).
LINK_GBPS = {"hopper": 450.0, "blackwell": 900.0, "cdna3": 448.0, "cdna4": 576.0, "ampere": 300.0}


@dataclass(frozen=True)
class StepLoad:
    """What the scheduler put in one step, as the step-time models need it."""

    decode_seqs: int  # requests scheduled for one token
    prefill_tokens: int  # tokens of requests scheduled for more than one
    context_tokens: int  # sum over scheduled requests of the tokens they attend to
    attention_pairs: int  # sum over requests of new tokens x their average context
    windowed_context: tuple[int, ...] = ()  # context_tokens capped at each sliding window

    @property
    def tokens(self) -> int:
        return self.decode_seqs + self.prefill_tokens

    @property
    def seqs(self) -> int:
        return self.decode_seqs + (1 if self.prefill_tokens else 0)


class StepTimeModel(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def windows(self) -> tuple[int, ...]: ...

    @property
    def request_overhead_s(self) -> float:
        """Seconds a request spends outside the engine before it arrives (HTTP, template)."""
        ...

    @property
    def delivery_s_per_running(self) -> float:
        """Seconds its trip outside the scheduler gains per request already in its engine
        (forecast.delivery; 0 when not measured)."""
        ...

    def step_s(self, load: StepLoad) -> float: ...

    def group_step_s(self, loads: Sequence[StepLoad]) -> float:
        """One step of engines that step in lockstep (DP of an MoE model): the slowest one's."""
        ...

    def to_dict(self) -> JsonObject: ...


@dataclass(frozen=True)
class Roofline:
    name: str
    windows: tuple[int, ...]
    request_overhead_s: float
    hbm_bytes_per_s: float
    flops_per_s: float
    link_bytes_per_s: float
    dense_weight_bytes: float
    expert_weight_bytes: float
    experts_per_token: int
    num_experts: int
    active_params: float  # per GPU, per token of its own engine, when the engine steps alone
    expert_active_params: float  # the experts' part of active_params
    full_kv_bytes_per_token: float
    window_kv_bytes_per_token: tuple[float, ...]
    state_bytes_per_seq: float
    attention_flops_per_pair: float
    tp: int
    allreduces_per_step: int
    hidden_size: int
    ep_ranks: int
    moe_layers: int
    delivery_s_per_running: float = 0.0  # not modelled from the catalog: only a measured run shows it

    def step_s(self, load: StepLoad) -> float:
        return self.group_step_s((load,))

    def group_step_s(self, loads: Sequence[StepLoad]) -> float:
        """With expert parallelism, the MoE layers of engines in lockstep are one all-to-all: every
        GPU runs its share of the experts for the tokens of all engines (vLLM's DP+EP: attention per
        engine, experts over dp x tp ranks), so an engine's prefill spreads its expert work over all
        of them. Without EP each engine's experts see its own tokens only."""
        group_tokens = sum(load.tokens for load in loads) if self.ep_ranks > 1 else None
        return max((self._engine_s(load, group_tokens) for load in loads), default=STEP_OVERHEAD_MS / 1000)

    def _engine_s(self, load: StepLoad, group_tokens: int | None) -> float:
        t = load.tokens
        # expert tokens per GPU, in units of its own engine's tokens' share (active_params is per tp)
        expert_t = t if group_tokens is None else group_tokens * self.tp / self.ep_ranks
        routed = t if group_tokens is None else group_tokens
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** routed if self.num_experts else 0.0
        weights = self.dense_weight_bytes + self.expert_weight_bytes * touched
        kv = load.context_tokens * self.full_kv_bytes_per_token + load.seqs * self.state_bytes_per_seq
        kv += sum(c * b for c, b in zip(load.windowed_context, self.window_kv_bytes_per_token, strict=False))
        memory_s = (weights + kv) / self.hbm_bytes_per_s
        dense_active = self.active_params - self.expert_active_params
        flops = 2 * (dense_active * t + self.expert_active_params * expert_t)
        flops += self.attention_flops_per_pair * load.attention_pairs
        compute_s = flops / self.flops_per_s
        return STEP_OVERHEAD_MS / 1000 + max(memory_s, compute_s) + self._collectives_s(t)

    def _collectives_s(self, tokens: int) -> float:
        out = 0.0
        if self.tp > 1:  # ring all-reduce after attention and MLP of every layer
            size = tokens * self.hidden_size * ACTIVATION_BYTES * 2 * (self.tp - 1) / self.tp
            out += self.allreduces_per_step * (size / self.link_bytes_per_s + ALLREDUCE_LATENCY_US / 1e6)
        if self.ep_ranks > 1:  # dispatch + combine of each token to its experts, per MoE layer
            size = tokens * self.experts_per_token * self.hidden_size * ACTIVATION_BYTES * 2
            out += self.moe_layers * (size * (1 - 1 / self.ep_ranks) / self.link_bytes_per_s)
        return out

    def to_dict(self) -> JsonObject:
        out: JsonObject = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in to_json_object(self).items()}
        out["assumptions"] = {
            "hbm_efficiency": HBM_EFFICIENCY,
            "mfu": MFU,
            "step_overhead_ms": STEP_OVERHEAD_MS,
            "allreduce_latency_us": ALLREDUCE_LATENCY_US,
            "expert_routing": "uniform: a step touches 1-(1-k/E)^tokens of the experts",
            "compute_peak": "dense BF16 (FP8/FP4 compute not modelled)",
            "pipeline": "PP stages priced as one stage over all layers / PP (no micro-batch overlap)",
        }
        return out


def roofline(p: Plan) -> Roofline:
    gpu, m, lay = p.gpu, p.model, p.layout
    if not gpu.hbm_bandwidth_gbps:
        raise UsageError(
            f"{gpu.name} has no memory bandwidth in the GPU catalog, so the roofline step time is unknown",
            hint="calibrate the step time on a measured run: --calibrate RUN_FOLDER",
        )
    peak = PEAK_BF16_TFLOPS.get(gpu.name)
    if peak is None:
        raise UsageError(f"no FLOPs figure for {gpu.name}", hint="use --calibrate RUN_FOLDER")
    dense_params, expert_params = _param_split(p)
    total = dense_params + expert_params
    gpu_bytes = float(p.weights.per_gpu_bytes)
    expert_share = expert_params / total if total else 0.0
    moe = m.moe
    k, e = (moe.experts_per_token, moe.num_experts) if moe else (0, 0)
    windows, window_bytes, full_bytes, state_bytes = _kv_bytes(p)
    return Roofline(
        name="roofline",
        windows=windows,
        request_overhead_s=0.0,
        hbm_bytes_per_s=gpu.hbm_bandwidth_gbps * 1e9 * HBM_EFFICIENCY,
        flops_per_s=peak * 1e12 * MFU,
        link_bytes_per_s=LINK_GBPS.get(gpu.arch, 300.0) * 1e9,
        dense_weight_bytes=gpu_bytes * (1 - expert_share),
        expert_weight_bytes=gpu_bytes * expert_share,
        experts_per_token=k,
        num_experts=e,
        active_params=(dense_params / lay.tp + (expert_params * k / e if e else 0.0) / lay.tp) / lay.pp,
        expert_active_params=(expert_params * k / e if e else 0.0) / lay.tp / lay.pp,
        full_kv_bytes_per_token=full_bytes,
        window_kv_bytes_per_token=window_bytes,
        state_bytes_per_seq=state_bytes,
        attention_flops_per_pair=_attention_flops(p),
        tp=lay.tp,
        allreduces_per_step=2 * m.num_layers // lay.pp,
        hidden_size=m.hidden_size,
        ep_ranks=lay.expert_ranks if lay.ep else 1,
        moe_layers=sum(1 for layer in m.layers if layer.mlp == "moe") // lay.pp,
    )


def _param_split(p: Plan) -> tuple[float, float]:
    groups = param_groups(p.model)
    experts = sum(g.params for g in groups if g.shard == "experts")
    return float(sum(g.params for g in groups) - experts), float(experts)


def _kv_bytes(p: Plan) -> tuple[tuple[int, ...], tuple[float, ...], float, float]:
    """Bytes per token a step reads for each attended token, per GPU (busiest PP stage)."""
    pp = p.layout.pp
    full = 0.0
    by_window: dict[int, float] = {}
    for spec in p.kv.specs.values():
        per_token = spec.page_bytes / spec.block_size
        if spec.kind in ("full", "mla"):
            full += per_token / pp
        elif spec.kind == "sliding" and spec.window:
            by_window[spec.window] = by_window.get(spec.window, 0.0) + per_token / pp
    windows = tuple(sorted(by_window))
    return windows, tuple(by_window[w] for w in windows), full, p.kv.state_bytes_per_sequence / pp


def _attention_flops(p: Plan) -> float:
    """FLOPs per (new token, attended token) pair per GPU: QK^T and PV over all attention layers."""
    m = p.model
    if m.mla:  # absorbed MLA attends in the latent space
        dim = m.num_attention_heads * (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    else:
        dim = m.num_attention_heads * 2 * m.head_dim
    layers = sum(1 for layer in m.layers if layer.attn in ("full", "mla", "sliding"))
    return 2.0 * dim * layers / p.layout.tp / p.layout.pp
