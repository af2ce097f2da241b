"""Parallel layouts (TP, PP, EP, attention DP, DCP, prefill/decode pools), the constraints vLLM
enforces on them, and the candidate layouts `oomkit plan --compare` ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomkit.errors import UsageError
from oomkit.serial import JsonObject

if TYPE_CHECKING:
    from oomkit.plan.model import ModelShape


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1  # attention data parallel (one engine per DP rank)
    ep: bool = False  # --enable-expert-parallel: experts divided over TP x DP ranks
    dcp: int = 1
    eplb_redundant: int = 0  # EPLB redundant experts (--eplb-config num_redundant_experts)
    pool: str = "serve"  # serve | prefill | decode

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def expert_ranks(self) -> int:
        return self.tp * self.dp

    @property
    def label(self) -> str:
        if self.ep and self.dp > 1 and self.tp == 1:
            core = f"DEP{self.dp}"
        elif self.ep and self.dp == 1:
            core = f"TEP{self.tp}"
        else:
            core = f"TP{self.tp}" + (f"xDP{self.dp}" if self.dp > 1 else "") + ("+EP" if self.ep else "")
        if self.pp > 1:
            core += f"xPP{self.pp}"
        if self.dcp > 1:
            core += f"+DCP{self.dcp}"
        return core if self.pool == "serve" else f"{self.pool} {core}"

    def to_dict(self) -> JsonObject:
        return {
            "label": self.label,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "ep": self.ep,
            "dcp": self.dcp,
            "eplb_redundant": self.eplb_redundant,
            "pool": self.pool,
            "gpus": self.gpus,
        }


def pp_partition(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices (vllm/distributed/utils.py): even split; the remainder goes to the
    stages just before the last, from the second-to-last backwards."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def validate(layout: Layout, m: ModelShape) -> None:
    """Raise UsageError naming the constraint a layout breaks (vllm/config/parallel.py and the
    model's own shape checks)."""
    for name, value in (("--tp", layout.tp), ("--pp", layout.pp), ("--dp", layout.dp), ("--dcp", layout.dcp)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1")
    if layout.pp > m.num_layers:
        raise UsageError(
            f"PP {layout.pp} is larger than the model's {m.num_layers} layers", hint=f"use --pp {m.num_layers} or fewer"
        )
    if m.num_attention_heads % layout.tp:
        raise UsageError(
            f"TP {layout.tp} does not divide the {m.num_attention_heads} attention heads",
            hint="pick a TP that divides the head count",
        )
    kv = m.num_kv_heads
    if not m.mla and any(layer.attn in ("full", "sliding") for layer in m.layers) and kv:
        if (kv % layout.tp) and (layout.tp % kv):
            raise UsageError(
                f"TP {layout.tp} and the {kv} KV heads must divide one another "
                "(vLLM shards KV heads when TP <= KV heads and replicates them otherwise)"
            )
    if m.linear and m.linear.kind in ("gdn", "mamba2", "kda"):
        heads = m.linear.num_k_heads if m.linear.kind == "gdn" else m.linear.num_heads
        if heads % layout.tp:
            raise UsageError(f"TP {layout.tp} does not divide the {heads} {m.linear.kind} heads")
    if layout.dcp > 1 and layout.tp % layout.dcp:
        raise UsageError(f"DCP {layout.dcp} must divide TP {layout.tp} (DCP shards KV inside the TP group)")
    if layout.dcp > 1 and m.count("sliding"):
        raise UsageError(
            "DCP does not support sliding-window layers (vLLM asserts it)", hint="drop --dcp for this model"
        )
    if layout.ep:
        if not m.moe:
            raise UsageError("--ep needs a mixture-of-experts model")
        slots = m.moe.num_experts + layout.eplb_redundant
        if slots % layout.expert_ranks and not layout.eplb_redundant:
            raise UsageError(
                f"EP over {layout.expert_ranks} ranks does not divide the {m.moe.num_experts} experts",
                hint="pick TPxDP that divides the expert count or add EPLB redundant experts",
            )


def candidates(m: ModelShape, gpu_counts: list[int], nvlink_domain: int) -> list[Layout]:
    """Layouts worth comparing for each GPU count: TP within an NVLink domain, TEP, TPxPP,
    DEP for MoE, DCP for MLA, and a prefill/decode split. Invalid ones are dropped."""
    out: list[Layout] = []
    for n in gpu_counts:
        tp_max = min(n, max(1, nvlink_domain))
        options = [Layout(tp=n)]
        if n > tp_max:
            options.append(Layout(tp=tp_max, pp=n // tp_max))
        else:
            options += [Layout(tp=n // 2, pp=2)] if n >= 4 else []
        if m.moe:
            options += [Layout(tp=n, ep=True), Layout(tp=1, dp=n, ep=True)]
            if n > tp_max:
                options.append(Layout(tp=tp_max, pp=n // tp_max, ep=True))
        if m.mla and n > 1:
            options.append(Layout(tp=min(n, tp_max), dcp=min(n, tp_max), pp=max(1, n // tp_max)))
        if m.moe and n >= 4:
            half = n // 2
            options += [Layout(tp=half, ep=True, pool="prefill"), Layout(tp=1, dp=half, ep=True, pool="decode")]
        for layout in options:
            if layout.gpus != n and layout.pool == "serve":
                continue
            try:
                validate(layout, m)
            except UsageError:
                continue
            if layout not in out:
                out.append(layout)
    return out
