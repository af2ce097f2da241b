"""Parameter groups of a model and the weight bytes each GPU holds for a layout.

Sharding follows vLLM's layers: Column/RowParallelLinear split by TP; KV heads are replicated when
TP exceeds them; MLA's q_a / kv_a projections, routers and norms are replicated
(deepseek_v2.py); vocab embedding and LM head are split by TP; routed experts are split across
TP x DP ranks (FusedMoE flattens DP into the expert TP or EP group) and, with EPLB, padded with
redundant experts; PP gives each stage its layers (get_pp_indices), the embedding to the first
stage and the LM head to the last."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.plan.layouts import Layout, pp_partition
from oomkit.plan.model import Layer, ModelShape
from oomkit.plan.quant import FORMATS, QuantScheme


@dataclass(frozen=True)
class ParamGroup:
    name: str  # representative module name, matched against the quantization ignore list
    params: int
    shard: str  # tp | kv | replicated | experts | vocab
    layer: int | None  # decoder layer index; None for embedding / head / vision
    is_linear: bool = True
    kv_heads: int = 0  # for shard == "kv": heads before sharding


@dataclass(frozen=True)
class Weights:
    per_stage_bytes: tuple[int, ...]  # bytes per GPU for each PP stage
    by_format_bytes: dict[str, int]  # whole model, by storage format
    total_bytes: int  # whole model, one replica
    total_params: int

    @property
    def per_gpu_bytes(self) -> int:
        return max(self.per_stage_bytes)


def param_groups(m: ModelShape, mtp: bool = False) -> list[ParamGroup]:
    h, groups = m.hidden_size, []
    layers = list(m.layers)
    if mtp and m.mtp_layers:
        last = m.layers[-1]
        kind = "mla" if m.mla else ("full" if last.attn in ("linear", "none") else last.attn)
        layers += [
            Layer(m.num_layers + i, kind, last.mlp if last.mlp != "none" else "dense") for i in range(m.mtp_layers)
        ]
    for layer in layers:
        groups += _attention(m, layer)
        groups += _mlp(m, layer)
        groups.append(ParamGroup(f"model.layers.{layer.index}.norm", 2 * h, "replicated", layer.index, False))
        if layer.index >= m.num_layers:  # MTP head: eh_proj fuses embedding and hidden state
            groups.append(ParamGroup(f"model.layers.{layer.index}.eh_proj", 2 * h * h, "replicated", layer.index))
    groups.append(ParamGroup("model.embed_tokens", m.vocab_size * h, "vocab", None, False))
    if not m.tie_word_embeddings:
        groups.append(ParamGroup("lm_head", m.vocab_size * h, "vocab", None, False))
    if m.vision:
        groups.append(ParamGroup("vision_tower.encoder", m.vision.params, "replicated", None, True))
    return groups


def _attention(m: ModelShape, layer: Layer) -> list[ParamGroup]:
    h, i, p = m.hidden_size, layer.index, f"model.layers.{layer.index}"
    if layer.attn in ("full", "sliding"):
        q, v_dim = m.num_attention_heads * m.head_dim, m.v_head_dim or m.head_dim
        kv = h * m.num_kv_heads * (m.head_dim + v_dim)
        return [
            ParamGroup(f"{p}.self_attn.q_proj", h * q * (2 if m.attn_output_gate else 1), "tp", i),
            ParamGroup(f"{p}.self_attn.k_proj", kv, "kv", i, kv_heads=m.num_kv_heads),
            ParamGroup(f"{p}.self_attn.o_proj", m.num_attention_heads * v_dim * h, "tp", i),
        ]
    if layer.attn == "mla":
        return _mla(m, layer)
    if layer.attn == "linear":
        return _linear(m, layer)
    return []


def _mla(m: ModelShape, layer: Layer) -> list[ParamGroup]:
    a, h, i, p = m.mla, m.hidden_size, layer.index, f"model.layers.{layer.index}.self_attn"
    assert a is not None
    nh, qk = m.num_attention_heads, a.qk_nope_head_dim + a.qk_rope_head_dim
    out = [
        ParamGroup(f"{p}.kv_a_proj_with_mqa", h * a.latent_elems_per_token, "replicated", i),
        ParamGroup(f"{p}.kv_b_proj", a.kv_lora_rank * nh * (a.qk_nope_head_dim + a.v_head_dim), "tp", i),
        ParamGroup(f"{p}.o_proj", nh * a.v_head_dim * h, "tp", i),
    ]
    if a.q_lora_rank:
        out += [
            ParamGroup(f"{p}.q_a_proj", h * a.q_lora_rank, "replicated", i),
            ParamGroup(f"{p}.q_b_proj", a.q_lora_rank * nh * qk, "tp", i),
        ]
    else:
        out.append(ParamGroup(f"{p}.q_proj", h * nh * qk, "tp", i))
    if a.output_gate:
        out.append(ParamGroup(f"{p}.g_proj", h * nh * a.v_head_dim, "tp", i))
    if a.indexer_head_dim and a.indexer_heads:  # replicated in vLLM (Indexer: ReplicatedLinear)
        idx = a.indexer_head_dim * a.indexer_heads * (a.q_lora_rank or h) + h * (a.indexer_head_dim + a.indexer_heads)
        out.append(ParamGroup(f"{p}.indexer.wq_b", idx, "replicated", i))
    return out


def _linear(m: ModelShape, layer: Layer) -> list[ParamGroup]:
    la, h, i = m.linear, m.hidden_size, layer.index
    assert la is not None
    if la.kind == "kda":
        p, proj = f"model.layers.{i}.self_attn", la.num_heads * la.head_dim
        gates = 2 * h * proj if la.full_rank_gate else 2 * (h * la.head_dim + la.head_dim * proj)
        return [
            ParamGroup(f"{p}.qkv_proj", 3 * h * proj, "tp", i),
            ParamGroup(f"{p}.o_proj", proj * h, "tp", i),
            ParamGroup(f"{p}.gate_proj", gates + h * la.num_heads, "tp", i),
            ParamGroup(f"{p}.conv1d", 3 * proj * la.conv_kernel, "tp", i, False),
        ]
    if la.kind == "gdn":
        p = f"model.layers.{i}.linear_attn"
        k, v = la.num_k_heads * la.head_k_dim, la.num_heads * la.head_dim
        return [
            ParamGroup(f"{p}.in_proj_qkvz", h * (2 * k + 2 * v) + h * 2 * la.num_heads, "tp", i),
            ParamGroup(f"{p}.conv1d", (2 * k + v) * la.conv_kernel, "tp", i, False),
            ParamGroup(f"{p}.out_proj", v * h, "tp", i),
        ]
    p, inner = f"model.layers.{i}.mixer", la.num_heads * la.head_dim  # mamba2
    conv = inner + 2 * la.n_groups * la.state_size
    return [
        ParamGroup(f"{p}.in_proj", h * (inner + conv + la.num_heads), "tp", i),
        ParamGroup(f"{p}.conv1d", conv * la.conv_kernel, "tp", i, False),
        ParamGroup(f"{p}.out_proj", inner * h, "tp", i),
    ]


def _mlp(m: ModelShape, layer: Layer) -> list[ParamGroup]:
    h, i, p = m.hidden_size, layer.index, f"model.layers.{layer.index}.mlp"
    if layer.mlp == "dense":
        return [ParamGroup(f"{p}.gate_proj", (3 if m.mlp_gated else 2) * h * m.intermediate_size, "tp", i)]
    if layer.mlp != "moe" or m.moe is None:
        return []
    e = m.moe
    width = e.latent_hidden or h
    mats = 3 if e.gated else 2
    out = [
        ParamGroup(f"{p}.experts.0.gate_proj", e.num_experts * mats * width * e.intermediate, "experts", i),
        ParamGroup(f"{p}.gate", h * e.num_experts, "replicated", i, False),
    ]
    if e.latent_hidden:
        out.append(ParamGroup(f"{p}.experts.latent_proj", 2 * h * e.latent_hidden, "tp", i))
    if e.num_shared:
        out.append(
            ParamGroup(f"{p}.shared_experts.gate_proj", e.num_shared * mats * h * e.shared_intermediate, "tp", i)
        )
    return out


def _names(name: str) -> tuple[str, ...]:
    # Checkpoints spell the same module with or without a multimodal wrapper prefix.
    return (name, f"language_model.{name}", f"model.language_model.{name.removeprefix('model.')}")


def _rank_params(g: ParamGroup, layout: Layout, num_experts: int) -> float:
    tp = layout.tp
    if g.shard == "tp" or g.shard == "vocab":
        return g.params / tp
    if g.shard == "kv":  # KV heads replicate once TP exceeds them
        return g.params * max(1, g.kv_heads // tp) / g.kv_heads if g.kv_heads else g.params / tp
    if g.shard == "experts":
        per_expert = g.params / num_experts
        slots = num_experts + layout.eplb_redundant
        # vLLM requires EP ranks to hold equal expert counts (redundant experts fill the gap).
        return per_expert * -(-slots // layout.expert_ranks) if layout.ep else per_expert * slots / layout.expert_ranks
    return g.params


def weights_for(m: ModelShape, layout: Layout, scheme: QuantScheme, mtp: bool = False) -> Weights:
    groups = param_groups(m, mtp)
    n_layers = m.num_layers + (m.mtp_layers if mtp else 0)
    stages = pp_partition(m.num_layers, layout.pp)
    per_stage = [0.0] * layout.pp
    by_format: dict[str, int] = {}
    total = 0
    experts = m.moe.num_experts if m.moe else 1
    for g in groups:
        fmt = scheme.format_for(_names(g.name), g.is_linear)
        bits = FORMATS[fmt].bits_per_param
        by_format[fmt] = by_format.get(fmt, 0) + int(g.params * bits / 8)
        total += int(g.params * bits / 8)
        rank_bytes = _rank_params(g, layout, experts) * bits / 8
        for s in _stages_of(g, stages, layout.pp, n_layers):
            per_stage[s] += rank_bytes
    return Weights(tuple(int(b) for b in per_stage), by_format, total, sum(g.params for g in groups))


def _stages_of(g: ParamGroup, stages: list[range], pp: int, n_layers: int) -> list[int]:
    if g.name == "model.embed_tokens":
        return [0]
    if g.name == "lm_head":
        return [pp - 1]
    if g.layer is None:  # vision tower runs on the first stage
        return [0]
    if g.layer >= stages[-1].stop:  # MTP layers sit with the last stage
        return [pp - 1]
    return [s for s, r in enumerate(stages) if g.layer in r]
