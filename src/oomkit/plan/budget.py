"""vLLM's memory budget per GPU, version by version (vllm-internals.md §4.1-§4.4; the CPU
worker from vllm/v1/worker/cpu_worker.py 0.32). The estimates (activation peak, CUDA graphs,
non-torch memory, CUDA context) are named assumptions: listed in every plan and overridable."""

from __future__ import annotations

import math
from dataclasses import dataclass

from oomkit.errors import UsageError
from oomkit.plan.layouts import Layout
from oomkit.plan.model import ModelShape
from oomkit.plan.settings import Settings
from oomkit.plan.versions import Behaviour
from oomkit.serial import JsonObject, to_json_object

GIB = 1024**3


@dataclass(frozen=True)
class Assumption:
    name: str
    value: float
    unit: str
    source: str
    overridden: bool = False

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


# Defaults of the estimates; `--assume NAME=VALUE` replaces any of them.
DEFAULTS: dict[str, tuple[float, str, str]] = {
    "other_gib": (
        0.35,
        "GiB",
        "non-torch memory charged to the budget (cuBLAS workspaces, allocator "
        "slack); V0 printed non_torch_memory=0.35GiB on a 3090 (fixture vllm-logs/002)",
    ),
    "cpu_runtime_gib": (
        0.70,
        "GiB",
        "CPU worker RSS besides weights; vLLM-CPU printed 0.68-0.73 GiB "
        "consumed by non-kv usages for tiny models (cpu-testbed.md §2, §6)",
    ),
    "cuda_context_gib": (
        0.5,
        "GiB",
        "CUDA context and NCCL buffers: outside the budget (>=0.11 snapshot "
        "after NCCL init) but physically present; checked at startup",
    ),
    "activation_factor": (
        1.0,
        "x",
        "multiplier on the activation-peak formula (per token: 2 x hidden "
        "plus the widest layer's intermediates; fits 002's 108 KB/token for Llama-8B "
        "within 6%)",
    ),
    "sampler_copies": (3.0, "x", "fp32 logits copies alive during the sampler dummy run (logits, probs, sort)"),
    "cudagraph_base_gib": (0.2, "GiB", "fixed CUDA-graph pool cost (workspaces)"),
    "cudagraph_mib_per_layer_size": (
        0.35,
        "MiB",
        "graph memory per decoder layer per capture size; "
        "2.65 GiB for a 80-layer model with 67 sizes (fixture vllm-logs/025)",
    ),
    "extensible_margin_gib": (
        1.0,
        "GiB",
        "0.34 extensible mode keeps max(1 GiB, 0.75 x transient peak) free (extensible_kv_cache.py, §4.4)",
    ),
}


def assumptions(overrides: dict[str, float]) -> dict[str, Assumption]:
    unknown = set(overrides) - set(DEFAULTS) - {"activation_gib", "cudagraph_gib"}
    if unknown:
        raise UsageError(
            f"unknown --assume name(s): {', '.join(sorted(unknown))}",
            hint="known: " + ", ".join(sorted([*DEFAULTS, "activation_gib", "cudagraph_gib"])),
        )
    out = {}
    for name, (value, unit, source) in DEFAULTS.items():
        if name in overrides:
            out[name] = Assumption(name, float(overrides[name]), unit, "--assume / calibration", True)
        else:
            out[name] = Assumption(name, value, unit, source)
    return out


def activation_bytes(m: ModelShape, layout: Layout, tokens: int, num_seqs: int, a: dict[str, Assumption]) -> int:
    """Peak transient memory of the profile run: one forward of `tokens` tokens (layers run one
    after another, so the widest layer sets the peak), or the sampler on `num_seqs` rows."""
    h, elem = m.hidden_size, 2
    tp, dp = layout.tp, layout.dp
    attn = (m.num_attention_heads * m.head_dim * 2 + 2 * max(1, m.num_kv_heads // tp) * m.head_dim) // tp
    widest = attn
    if any(layer.mlp == "dense" for layer in m.layers):
        widest = max(widest, 3 * m.intermediate_size // tp)
    if m.moe and any(layer.mlp == "moe" for layer in m.layers):
        e = m.moe
        width = e.latent_hidden or h
        if layout.ep:  # each rank runs its local experts on the tokens routed to them (2x imbalance)
            routed = min(e.experts_per_token, 2 * e.experts_per_token / (tp * dp))
            widest = max(widest, int(routed * (3 * e.intermediate + width)))
        else:
            widest = max(widest, e.experts_per_token * (3 * e.intermediate // (tp * dp) + width))
    if m.linear:
        la = m.linear
        widest = max(widest, 4 * la.num_heads * la.head_dim // tp)
    forward = tokens * (widest + 2 * h) * elem
    sampler = min(num_seqs, tokens) * m.vocab_size * 4 * a["sampler_copies"].value
    return int(max(forward, sampler) * a["activation_factor"].value)


def cudagraph_bytes(m: ModelShape, pp: int, n_sizes: int, a: dict[str, Assumption]) -> int:
    layers = math.ceil(m.num_layers / pp)
    mib = a["cudagraph_mib_per_layer_size"].value * layers * n_sizes
    return int(a["cudagraph_base_gib"].value * GIB + mib * 1024**2)


@dataclass(frozen=True)
class Usage:
    """What one GPU spends besides the KV cache: weights, the profile run's peak, CUDA graphs."""

    weights_bytes: int
    activation_bytes: int
    cudagraph_bytes: int


@dataclass(frozen=True)
class Budget:
    capacity_bytes: int
    budget_bytes: int  # what vLLM may use: ceil(total x gmu), or the explicit KV bytes path
    weights_bytes: int
    activation_bytes: int
    cudagraph_bytes: int
    other_bytes: int
    kv_bytes: int  # available for the KV cache (may be negative)
    startup_ok: bool
    mode: str  # explicit | extensible | charged | uncharged | v1_0_8 | v0 | cpu
    notes: tuple[str, ...]


def budget(capacity: int, usage: Usage, s: Settings, b: Behaviour, platform: str, a: dict[str, Assumption]) -> Budget:
    """`capacity` bytes of device memory; `s` gives gpu_memory_utilization and, when set,
    --kv-cache-memory-bytes (the pool is given and profiling is skipped)."""
    weights, act, graphs = usage.weights_bytes, usage.activation_bytes, usage.cudagraph_bytes
    gmu, kv_bytes = s["gpu_memory_utilization"], s["kv_cache_memory_bytes"]
    other = int(a["other_gib"].value * GIB)
    ctx = int(a["cuda_context_gib"].value * GIB)
    notes: list[str] = []
    if platform == "cpu":
        other, graphs, act = int(a["cpu_runtime_gib"].value * GIB), 0, 0
    requested = math.ceil(capacity * gmu)
    if kv_bytes is not None:  # --kv-cache-memory-bytes: profiling skipped, the pool is given
        physical = weights + act + graphs + other + kv_bytes + (0 if platform == "cpu" else ctx)
        if physical > capacity:
            notes.append("weights, runtime and the requested KV pool exceed the device memory")
        return Budget(
            capacity, capacity, weights, act, graphs, other, kv_bytes, physical <= capacity, "explicit", tuple(notes)
        )
    non_kv = weights + act + other
    if platform == "cpu":  # kv = ceil(node_total x gmu) - worker RSS (cpu_worker.py)
        return Budget(capacity, requested, weights, 0, 0, other, requested - weights - other, True, "cpu", ())
    if b.extensible_kv:
        used = weights + other + graphs
        headroom = capacity - ctx - used
        margin = max(int(a["extensible_margin_gib"].value * GIB), int(0.75 * act))
        kv = min(requested - used, headroom - margin) - act
        return Budget(capacity, requested, weights, act, graphs, other, kv, True, "extensible", ())
    startup_ok = b.engine == "v0" or b.version < (0, 10) or requested <= capacity - ctx
    if not startup_ok:
        notes.append("free memory at startup is below gpu_memory_utilization x total: vLLM refuses to start")
    if b.engine == "v0":
        return Budget(capacity, requested, weights, act, 0, other, requested - non_kv, True, "v0", tuple(notes))
    if b.version < (0, 10):  # 0.8: everything on the GPU counts, CUDA context included
        return Budget(
            capacity,
            requested,
            weights,
            act,
            graphs,
            other + ctx,
            requested - non_kv - ctx,
            startup_ok,
            "v1_0_8",
            tuple(notes),
        )
    if b.cudagraphs_charged:
        return Budget(
            capacity,
            requested,
            weights,
            act,
            graphs,
            other,
            requested - non_kv - graphs,
            startup_ok,
            "charged",
            tuple(notes),
        )
    if capacity - ctx - requested < graphs:
        notes.append(
            "CUDA graphs are captured outside the budget in this version and may not fit "
            "the headroom above gpu_memory_utilization"
        )
    return Budget(
        capacity, requested, weights, act, graphs, other, requested - non_kv, startup_ok, "uncharged", tuple(notes)
    )
