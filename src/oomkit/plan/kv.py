"""KV cache pages, layer grouping, block pool and capacity exactly as vLLM 0.32 computes them
(vllm/v1/kv_cache_interface.py page_size_bytes / max_memory_usage_bytes,
vllm/v1/core/kv_cache_utils.py get_kv_cache_groups / get_kv_cache_configs /
get_max_concurrency_for_kv_cache_config), with the older formulas of vllm-internals.md §4.8."""

from __future__ import annotations

from dataclasses import dataclass, replace

from oomkit.errors import UsageError
from oomkit.plan.layouts import Layout, pp_partition
from oomkit.plan.model import ModelShape
from oomkit.plan.quant import KvDtype
from oomkit.plan.settings import Settings
from oomkit.plan.state import StateConfig, hybrid_block_size, state_bytes
from oomkit.plan.versions import Behaviour
from oomkit.units import cdiv


@dataclass(frozen=True)
class Spec:
    """One layer's cache on one rank (a KVCacheSpec)."""

    kind: str  # full | sliding | mla | mamba
    page_bytes: int
    block_size: int
    window: int | None = None
    mamba_blocks: int = 0  # state blocks a request holds (mamba)
    extra_retained: int = 0  # sliding: tokens kept below the window for speculative re-prefill

    def blocks_per_request(self, max_model_len: int, dcp: int, in_flight_tokens: int) -> int:
        if self.kind == "mamba":
            return self.mamba_blocks
        if self.kind == "sliding":  # SlidingWindowSpec.max_admission_blocks_per_request
            assert self.window is not None
            held = self.window - 1 + self.extra_retained + in_flight_tokens
            return cdiv(min(held, max_model_len), self.block_size) + 1
        # FullAttentionSpec / MLAAttentionSpec: token positions sharded by DCP
        return cdiv(cdiv(max_model_len, dcp) if dcp > 1 else max_model_len, self.block_size)

    @property
    def holds_tokens(self) -> bool:
        return self.kind != "mamba"


@dataclass(frozen=True)
class Group:
    layers: tuple[str, ...]
    specs: tuple[Spec, ...]  # one per layer (UniformTypeKVCacheSpecs keeps per-layer specs)

    def pages(self, on: set[str] | None = None) -> int:
        return sum(s.page_bytes for n, s in zip(self.layers, self.specs, strict=False) if on is None or n in on)

    def blocks_per_request(self, max_model_len: int, dcp: int, in_flight: int) -> int:
        return max(s.blocks_per_request(max_model_len, dcp, in_flight) for s in self.specs)


@dataclass(frozen=True)
class KvInputs:
    model: ModelShape
    layout: Layout
    kv_dtype: KvDtype
    block_size: int  # resolved before hybrid alignment
    max_model_len: int
    in_flight_tokens: int  # max_concurrent_batches x max_num_batched_tokens
    state: StateConfig
    mla_align_min: int
    kernel_block: int
    extra_layers: int = 0  # MTP draft layers appended to the model; they sit on the last PP stage
    sliding_extra_tokens: int = 0  # SlidingWindowSpec.extra_retained_tokens


@dataclass(frozen=True)
class KvLayout:
    block_size: int
    mamba_page_padded: int | None
    specs: dict[str, Spec]
    groups: tuple[Group, ...]
    stage_layers: tuple[frozenset[str], ...]
    padding_layers: int
    kv_bytes_per_token: int  # attention bytes per token on the busiest rank
    state_bytes_per_sequence: int  # linear-attention state of one sequence, unpadded, one slot


def attention_bytes_per_token(m: ModelShape, kind: str, tp: int, kvd: KvDtype) -> int:
    if kind == "mla":
        assert m.mla is not None
        if kvd.mla_bytes_per_token:
            return kvd.mla_bytes_per_token
        # MLAAttentionSpec: num_kv_heads=1, max_tp_shards=1 -> the same latent on every TP rank.
        return int(m.mla.latent_elems_per_token * kvd.bytes_per_elem)
    kv_rank = max(1, m.num_kv_heads // tp)  # replicated when TP exceeds the KV heads
    # AttentionSpec.state_content_size_bytes: (head_size + head_size_v) per head and token
    return int(kv_rank * (m.head_dim + (m.v_head_dim or m.head_dim)) * kvd.bytes_per_elem)


# DeepSeek V3.2 indexer cache: fp8 keys plus one fp32 scale per 128 (deepseek_v2.py, uint8 cache).
def indexer_bytes_per_token(m: ModelShape) -> int:
    assert m.mla is not None and m.mla.indexer_head_dim
    return m.mla.indexer_head_dim + m.mla.indexer_head_dim // 128 * 4


def build(inp: KvInputs) -> KvLayout:
    m, tp = inp.model, inp.layout.tp
    attn_kind = "mla" if m.mla else "full"
    attn_1tok = attention_bytes_per_token(m, attn_kind, tp, inp.kv_dtype)
    has_state = m.count("linear") > 0
    state_page = state_bytes(m, tp, inp.state) if has_state else 0
    block, padded = inp.block_size, None
    if has_state and (m.count("full") or m.count("mla")):
        block = hybrid_block_size(
            attn_1tok, state_page, inp.block_size, inp.kernel_block, inp.mla_align_min if m.mla else 0
        )
        padded = block * attn_1tok if block * attn_1tok != state_page else None
    specs: dict[str, Spec] = {}
    names_by_layer: dict[int, list[str]] = {}
    for layer in m.layers:
        names = names_by_layer.setdefault(layer.index, [])
        if layer.attn in ("full", "sliding", "mla"):
            per_tok = attention_bytes_per_token(m, layer.attn, tp, inp.kv_dtype)
            extra = inp.sliding_extra_tokens if layer.attn == "sliding" else 0
            specs[f"{layer.index}.attn"] = Spec(layer.attn, block * per_tok, block, layer.window, extra_retained=extra)
            names.append(f"{layer.index}.attn")
            if layer.attn == "mla" and m.mla and m.mla.indexer_head_dim:
                specs[f"{layer.index}.indexer"] = Spec("mla", block * indexer_bytes_per_token(m), block)
                names.append(f"{layer.index}.indexer")
        elif layer.attn == "linear":
            specs[f"{layer.index}.state"] = Spec(
                "mamba", padded or state_page, block, mamba_blocks=inp.state.slots_per_request
            )
            names.append(f"{layer.index}.state")
    groups, padding = make_groups(specs)
    parts = pp_partition(m.num_layers - inp.extra_layers, inp.layout.pp)
    parts[-1] = range(parts[-1].start, m.num_layers)
    stages = tuple(frozenset(n for i in r for n in names_by_layer.get(i, [])) for r in parts)
    per_token = max(
        sum(s.page_bytes // s.block_size for n, s in specs.items() if s.holds_tokens and n in st) for st in stages
    )
    return KvLayout(block, padded, specs, groups, stages, padding, per_token, state_page * m.count("linear"))


def sliding_lookahead(behaviour: Behaviour, m: ModelShape, num_spec_tokens: int) -> int:
    """SlidingWindowSpec.extra_retained_tokens = num_prefill_lookahead_tokens - 1 (0.28+), with MTP
    loaded: a chain of several MTP modules re-prefills num_speculative_tokens - 1 tokens below the
    window; one module reads one token ahead (config/vllm.py num_prefill_lookahead_tokens)."""
    if not behaviour.sliding_lookahead or min(m.mtp_layers, num_spec_tokens) <= 1:
        return 0
    return num_spec_tokens - 1


def check_sinks(m: ModelShape, block: int) -> None:
    """SinkFullAttentionManager asserts sink_len % block_size == 0: vLLM does not start otherwise."""
    if m.sink_tokens and m.sink_tokens % block:
        raise UsageError(
            f"{m.name} holds {m.sink_tokens} sink tokens per layer, not a multiple of block size {block}: "
            "vLLM's SinkFullAttentionManager refuses to start (sink_len % block_size == 0)",
            hint="pass a --block-size that divides the sink length",
        )


def sink_notes(m: ModelShape, behaviour: Behaviour) -> list[str]:
    if not m.sink_tokens or behaviour.sink_manager_starts:
        return []
    return [
        "vLLM fails to start this model after printing its KV pool: SinkFullAttentionManager.__init__ "
        "does not take needs_kv_cache_zeroing (kv_cache_coordinator.py; 0.30-0.34)"
    ]


def sink_blocks(kv: KvLayout, sink_tokens: int, behaviour: Behaviour) -> int:
    """Blocks SinkFullAttentionManager pops from the free queue at start (0.14-0.29): sink_len //
    block_size for each group of sink layers; none from 0.30 (single_type_kv_cache_manager.py)."""
    if not sink_tokens or not behaviour.sink_blocks_reserved:
        return 0
    return sum(1 for g in kv.groups if g.specs[0].kind == "full") * (sink_tokens // kv.block_size)


def make_groups(specs: dict[str, Spec]) -> tuple[tuple[Group, ...], int]:
    """get_kv_cache_groups (kv_cache_utils.py, 0.32): one group when all specs match or share a
    type; otherwise unify page sizes, bucket identical specs and split buckets into groups of
    `group_size` layers by striding."""
    if not specs:
        return (), 0
    names, values = list(specs), list(specs.values())
    if len(set(values)) == 1 or _uniform_type(values):
        return (Group(tuple(names), tuple(values)),), 0
    unified = _unify_pages(specs)
    buckets: dict[Spec, list[str]] = {}
    for name, spec in unified.items():
        buckets.setdefault(spec, []).append(name)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups, padding = [], 0
    for spec, layer_names in buckets.items():
        if len(layer_names) % group_size:
            padding += group_size - len(layer_names) % group_size
        n_groups = cdiv(len(layer_names), group_size)
        for i in range(n_groups):
            chosen = tuple(layer_names[i::n_groups])
            groups.append(Group(chosen, tuple(spec for _ in chosen)))
    return tuple(groups), padding


def _uniform_type(values: list[Spec]) -> bool:
    # UniformTypeKVCacheSpecs.is_uniform_type: same block size and one spec family (full attention
    # and MLA are both FullAttentionSpec), sliding windows only with one window size.
    if len({v.block_size for v in values}) > 1:
        return False
    kinds = {v.kind for v in values}
    if kinds <= {"full", "mla"}:
        return True
    if kinds == {"sliding"}:
        return len({v.window for v in values}) == 1
    if kinds == {"mamba"}:
        return len(set(values)) == 1
    return False


def _unify_pages(specs: dict[str, Spec]) -> dict[str, Spec]:
    """unify_kv_cache_spec_page_size: smaller attention pages get a larger block size (integer
    ratio); Mamba pages are padded to the largest page."""
    top = max(s.page_bytes for s in specs.values())
    out = {}
    for name, s in specs.items():
        if s.page_bytes == top:
            out[name] = s
        elif s.kind == "mamba" or top % s.page_bytes:
            out[name] = replace(s, page_bytes=top)  # padded page (non-MLA attention and mamba)
        else:
            ratio = top // s.page_bytes
            out[name] = replace(s, page_bytes=top, block_size=s.block_size * ratio)
    return out


@dataclass(frozen=True)
class Capacity:
    bytes_per_block: int  # worst PP stage
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    fits_one_request: bool
    no_memory: bool  # vLLM's "No available memory for the cache blocks"
    estimated_max_model_len: int | None
    needed_bytes: int  # KV memory one max_model_len request needs (worst stage)


def capacity(kv: KvLayout, available_bytes: int, s: Settings, dcp: int, behaviour: Behaviour) -> Capacity:
    """The block pool `available_bytes` buys, and what it holds, counted with that version's formulas."""
    max_model_len, in_flight, num_blocks_override = (
        s["max_model_len"],
        s["in_flight_tokens"],
        s["num_gpu_blocks_override"],
    )
    stage_bpb = [bytes_per_block(kv.groups, st) for st in kv.stage_layers]
    stage_bpb = [b for b in stage_bpb if b > 0] or [1]
    if num_blocks_override is not None:  # get_kv_cache_configs: the override sets the capacity
        stage_avail = [num_blocks_override * b for b in stage_bpb]
    else:
        stage_avail = [available_bytes for _ in stage_bpb]
    num_blocks = min(max(0, a) // b for a, b in zip(stage_avail, stage_bpb, strict=False))
    per_req = blocks_needed(kv.groups, max_model_len, dcp, in_flight)
    check = [a - (bpb if behaviour.null_block_reserved else 0) for a, bpb in zip(stage_avail, stage_bpb, strict=False)]
    no_memory = any(c <= 0 for c in check)
    fits = not no_memory and all(b * per_req <= c for b, c in zip(stage_bpb, check, strict=False))
    estimate = None
    if not fits and not no_memory:
        estimate = min(
            _estimate_len(kv.groups, b, c, max_model_len, dcp, in_flight)
            for b, c in zip(stage_bpb, check, strict=False)
        )
    conc = num_blocks / per_req if per_req else 0.0
    if behaviour.concurrency_formula == "tokens_over_len":
        conc = num_blocks * kv.block_size / max_model_len
    if behaviour.tokens_formula == "concurrency_x_len":
        tokens = int(conc * max_model_len)
    elif behaviour.tokens_formula == "blocks_per_group":
        min_block = min(g.specs[0].block_size for g in kv.groups)
        tokens = num_blocks // len(kv.groups) * min_block * dcp
    else:
        tokens = num_blocks * kv.block_size
    worst = max(range(len(stage_bpb)), key=lambda i: stage_bpb[i])
    return Capacity(
        stage_bpb[worst], num_blocks, per_req, conc, tokens, fits, no_memory, estimate, stage_bpb[worst] * per_req
    )


def bytes_per_block(groups: tuple[Group, ...], on: frozenset[str] | None = None) -> int:
    """_get_kv_cache_bytes_per_block (layer-outer layout): the largest group's page sum."""
    return max((g.pages(set(on) if on is not None else None) for g in groups), default=0)


def blocks_needed(groups: tuple[Group, ...], max_model_len: int, dcp: int, in_flight: int) -> int:
    return sum(g.blocks_per_request(max_model_len, dcp, in_flight) for g in groups)


def _estimate_len(groups: tuple[Group, ...], bpb: int, check: int, max_len: int, dcp: int, in_flight: int) -> int:
    """_estimate_max_model_len_from_groups: binary search over [1, max_model_len]; 0 if even one
    token does not fit."""

    def fits(n: int) -> bool:
        return bpb * blocks_needed(groups, n, dcp, in_flight) <= check

    if not fits(1):
        return 0
    lo, hi, best = 1, max_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
