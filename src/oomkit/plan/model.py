"""Model shape from a Hugging Face config.json: the layer kinds and dimensions the planner needs.

Field names follow the published configs (Llama, Qwen3/3.5/Next, DeepSeek V3/V3.2, Kimi K2/K3,
gpt-oss, Mixtral, Nemotron-H, Gemma 3); the layer typing follows how vLLM 0.32 builds each model
(source notes inline)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from oomkit.errors import InputError
from oomkit.fsio import JSON_ERRORS, read_text_limited
from oomkit.plan.quant import QuantScheme, scheme_from_config
from oomkit.serial import JsonObject

ATTN_KINDS = ("full", "sliding", "mla", "linear", "none")


@dataclass(frozen=True)
class MlaDims:
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    output_gate: bool = False
    indexer_head_dim: int | None = None  # DSA/NSA sparse indexer (DeepSeek V3.2, GLM-5)
    indexer_heads: int | None = None

    @property
    def latent_elems_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class LinearAttnDims:
    """Constant-size state per sequence. kind: kda (Kimi Delta Attention), gdn (gated delta net,
    Qwen3-Next/3.5), mamba2 (Nemotron-H)."""

    kind: str
    num_heads: int  # kda/mamba2 heads; gdn value heads
    head_dim: int  # kda head dim; gdn value head dim; mamba2 head dim
    conv_kernel: int
    num_k_heads: int = 0  # gdn key heads
    head_k_dim: int = 0  # gdn key head dim
    n_groups: int = 0  # mamba2
    state_size: int = 0  # mamba2 ssm state
    full_rank_gate: bool = False  # kda gate projections


@dataclass(frozen=True)
class MoeDims:
    num_experts: int
    experts_per_token: int
    intermediate: int
    num_shared: int = 0
    shared_intermediate: int = 0
    latent_hidden: int | None = None  # latent MoE (Kimi K3): experts run in a narrower width
    gated: bool = True  # gate+up+down (SwiGLU) vs up+down (relu2)


@dataclass(frozen=True)
class VisionDims:
    layers: int
    hidden: int
    intermediate: int
    out_hidden: int

    @property
    def params(self) -> int:
        # ViT block: qkv + out (4 h^2) and a 2-matrix MLP; a 2x2 patch merger into the text width.
        block = 4 * self.hidden**2 + 2 * self.hidden * self.intermediate
        merger = (4 * self.hidden) ** 2 + 4 * self.hidden * self.out_hidden
        return self.layers * block + merger


@dataclass(frozen=True)
class Layer:
    index: int
    attn: str  # one of ATTN_KINDS
    mlp: str  # dense | moe | none
    window: int | None = None


@dataclass(frozen=True)
class ModelShape:
    name: str
    source: str
    architecture: str
    model_type: str
    dtype: str
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    layers: tuple[Layer, ...]
    quant: QuantScheme
    mlp_gated: bool = True
    attn_output_gate: bool = False
    tie_word_embeddings: bool = False
    mla: MlaDims | None = None
    linear: LinearAttnDims | None = None
    moe: MoeDims | None = None
    vision: VisionDims | None = None
    mtp_layers: int = 0
    ssm_dtype_hint: str | None = None  # config's mamba_ssm_dtype / mamba_ssm_cache_dtype
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def count(self, attn: str) -> int:
        return sum(1 for layer in self.layers if layer.attn == attn)

    def to_dict(self) -> JsonObject:
        kinds: JsonObject = {k: self.count(k) for k in ATTN_KINDS if self.count(k)}
        return {
            "name": self.name,
            "source": self.source,
            "architecture": self.architecture,
            "dtype": self.dtype,
            "layers": self.num_layers,
            "layer_kinds": kinds,
            "moe_layers": sum(1 for layer in self.layers if layer.mlp == "moe"),
            "linear_kind": self.linear.kind if self.linear else None,
            "vision_tower": self.vision is not None,
            "mtp_layers": self.mtp_layers,
            "quantization": self.quant.to_dict(),
            "notes": list(self.notes),
        }


MAX_LAYERS = 10_000  # the largest published models have < 200 layers
MAX_COUNT = 2**40  # a dimension or count past it is a corrupt config (and overflows float arithmetic)
CONFIG_LIMIT_BYTES = 8 * 2**20  # a config.json is a few KB (the largest fixture: 9.5 KB)


class _Cfg:
    """Reads config fields and names the missing one together with the flag that supplies it."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def get(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        return default

    def need(self, *keys: str, flag: str | None = None) -> Any:
        value = self.get(*keys)
        if value is None:
            supply = flag or f"--hf-overrides '{{\"{keys[0]}\": ...}}'"
            raise InputError(
                f"{self.where} has no `{keys[0]}`, which the planner needs",
                hint=f"add it to the config or pass {supply}",
            )
        return value


def load_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InputError(f"no config.json at {path}", hint="pass a model directory, a config.json, or a catalog name")
    try:
        data = json.loads(read_text_limited(p, CONFIG_LIMIT_BYTES, "model config.json"))
    except JSON_ERRORS as err:
        raise InputError(f"{p} is not valid JSON: {str(err)[:200]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{p} does not hold a JSON object")
    return data


def shape_from_config(
    data: dict[str, Any], name: str, source: str, overrides: dict[str, Any] | None = None
) -> ModelShape:
    try:
        shape = _shape(data, name, source, overrides)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, OverflowError, ZeroDivisionError) as err:
        # A hand-edited or truncated config holds a list, null or NaN where a number belongs.
        raise InputError(
            f"config of {name} has a field of the wrong type ({type(err).__name__}: {err})",
            hint="compare it with the model's config.json on the Hub, or fix it with --hf-overrides",
        ) from None
    _check_counts(shape, name)
    return shape


def _check_counts(obj: Any, name: str) -> None:
    """Every `int` field of the shape holds a whole number within MAX_COUNT: a list, a string or 10**400
    that a config passed through is refused here, not deep inside the planner."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if is_dataclass(item):
                _check_counts(item, name)
            elif (
                str(f.type).startswith("int")
                and item is not None
                and not (isinstance(item, int) and -MAX_COUNT <= item <= MAX_COUNT)
            ):
                got = f"{item.bit_length()}-bit number" if isinstance(item, int) else type(item).__name__
                raise InputError(
                    f"config of {name}: {f.name} must be a whole number up to 2**40, not a {got}",
                    hint="compare it with the model's config.json on the Hub, or fix it with --hf-overrides",
                )


def _shape(data: dict[str, Any], name: str, source: str, overrides: dict[str, Any] | None) -> ModelShape:
    text = dict(data.get("text_config") or data)
    text.update(overrides or {})
    cfg = _Cfg(text, f"config of {name}")
    qcfg = text.get("quantization_config") or data.get("quantization_config")
    dtype = str(cfg.get("torch_dtype", "dtype", default=data.get("torch_dtype") or data.get("dtype") or "bfloat16"))
    hidden = int(cfg.need("hidden_size"))
    n_layers = int(cfg.need("num_hidden_layers", "num_layers"))
    if not 0 < n_layers <= MAX_LAYERS:  # a flipped digit must not build a billion-layer table
        raise InputError(
            f"config of {name}: num_hidden_layers {n_layers} is outside 1..{MAX_LAYERS}",
            hint="fix num_hidden_layers in the config",
        )
    heads = int(cfg.need("num_attention_heads"))
    head_dim = int(cfg.get("head_dim", "attention_head_dim", default=hidden // heads))
    mla = _mla(cfg)
    linear = _linear(cfg)
    moe = _moe(cfg)
    layers, notes = _layers(cfg, n_layers, mla, linear, moe)
    arch = (data.get("architectures") or text.get("architectures") or ["unknown"])[0]
    return ModelShape(
        name=name,
        source=source,
        architecture=arch,
        model_type=str(text.get("model_type") or data.get("model_type") or ""),
        dtype=dtype,
        hidden_size=hidden,
        vocab_size=int(cfg.need("vocab_size")),
        max_position_embeddings=cfg.get("max_position_embeddings", "max_sequence_length", "seq_length"),
        num_attention_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads", default=heads)),
        head_dim=head_dim,
        intermediate_size=int(cfg.get("intermediate_size", default=4 * hidden)),
        layers=layers,
        quant=scheme_from_config(qcfg, dtype),
        mlp_gated=str(cfg.get("mlp_hidden_act", "hidden_act", default="silu")) != "relu2",
        attn_output_gate=bool(cfg.get("attn_output_gate", default=False)),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        mla=mla,
        linear=linear,
        moe=moe,
        vision=_vision(data.get("vision_config"), hidden),
        mtp_layers=int(
            cfg.get("num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)
            or (cfg.get("num_mtp_modules", default=0) if cfg.get("use_mtp") else 0)
        ),
        ssm_dtype_hint=cfg.get("mamba_ssm_dtype", "mamba_ssm_cache_dtype"),
        notes=tuple(notes),
    )


def _mla(cfg: _Cfg) -> MlaDims | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    return MlaDims(
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=int(cfg.get("kv_lora_rank")),
        qk_rope_head_dim=int(cfg.need("qk_rope_head_dim")),
        qk_nope_head_dim=int(cfg.need("qk_nope_head_dim")),
        v_head_dim=int(cfg.need("v_head_dim")),
        output_gate=bool(cfg.get("mla_use_output_gate", default=False)),
        indexer_head_dim=cfg.get("index_head_dim"),
        indexer_heads=cfg.get("index_n_heads"),
    )


def _linear(cfg: _Cfg) -> LinearAttnDims | None:
    lac = cfg.get("linear_attn_config")
    if lac:  # Kimi Linear / K3 (vllm/model_executor/layers/mamba/mamba_utils.py kda_state_shape)
        return LinearAttnDims(
            "kda",
            int(lac["num_heads"]),
            int(lac["head_dim"]),
            int(lac.get("short_conv_kernel_size", 4)),
            full_rank_gate=bool(lac.get("use_full_rank_gate", False)),
        )
    if cfg.get("linear_num_value_heads") is not None:  # Qwen3-Next / Qwen3.5 gated delta net
        return LinearAttnDims(
            "gdn",
            int(cfg.get("linear_num_value_heads")),
            int(cfg.need("linear_value_head_dim")),
            int(cfg.get("linear_conv_kernel_dim", default=4)),
            num_k_heads=int(cfg.need("linear_num_key_heads")),
            head_k_dim=int(cfg.need("linear_key_head_dim")),
        )
    if cfg.get("hybrid_override_pattern") is not None:  # Nemotron-H mamba2
        return LinearAttnDims(
            "mamba2",
            int(cfg.need("mamba_num_heads")),
            int(cfg.need("mamba_head_dim")),
            int(cfg.get("conv_kernel", default=4)),
            n_groups=int(cfg.need("n_groups")),
            state_size=int(cfg.need("ssm_state_size")),
        )
    return None


def _moe(cfg: _Cfg) -> MoeDims | None:
    experts = cfg.get("n_routed_experts", "num_local_experts", "num_experts")
    if not experts:
        return None
    topk = int(cfg.need("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts"))
    inter = int(cfg.get("moe_intermediate_size", default=cfg.get("intermediate_size")))
    shared = int(cfg.get("n_shared_experts", "num_shared_experts", default=0) or 0)
    shared_inter = cfg.get(
        "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "shared_intermediate_size"
    )
    if shared_inter and not shared:
        shared = 1  # Qwen3-Next / Nemotron: one shared expert of the given width
    return MoeDims(
        int(experts),
        topk,
        inter,
        shared,
        int(shared_inter or inter if shared else 0),
        latent_hidden=cfg.get("routed_expert_hidden_size"),
        gated=str(cfg.get("mlp_hidden_act", "hidden_act", default="silu")) != "relu2",
    )


def _layers(
    cfg: _Cfg, n: int, mla: MlaDims | None, linear: LinearAttnDims | None, moe: MoeDims | None
) -> tuple[tuple[Layer, ...], list[str]]:
    notes: list[str] = []
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None
    pattern = cfg.get("hybrid_override_pattern")
    if pattern:  # Nemotron-H: M mamba, * attention, - dense MLP, E MoE; one char per layer
        kinds = {"M": ("linear", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
        if len(pattern) != n:
            raise InputError(f"hybrid_override_pattern has {len(pattern)} entries for {n} layers")
        return tuple(Layer(i, *kinds[ch]) for i, ch in enumerate(pattern)), notes
    attn = [_attn_kind(cfg, i, mla, linear) for i in range(n)]
    if window and "sliding" not in attn and not cfg.get("layer_types"):
        # Mistral/Mixtral style: no per-layer window, so vLLM's Attention layer takes the model-level
        # window from CacheConfig.sliding_window for every full-attention layer
        # (vllm/model_executor/layers/attention/attention.py Attention.__init__, 0.32-0.34).
        attn = ["sliding" if kind == "full" else kind for kind in attn]
        notes.append(
            f"sliding_window {window} is set without layer_types: vLLM applies it to every attention "
            "layer (Attention.__init__ falls back to cache_config.sliding_window)"
        )
    mlp = [_mlp_kind(cfg, i, moe) for i in range(n)]
    return tuple(
        Layer(i, a, m, window if a == "sliding" else None) for i, (a, m) in enumerate(zip(attn, mlp, strict=False))
    ), notes


def _attn_kind(cfg: _Cfg, i: int, mla: MlaDims | None, linear: LinearAttnDims | None) -> str:
    lac = cfg.get("linear_attn_config")
    if lac:  # 1-based layer lists (KimiLinearConfig.is_kda_layer)
        return "linear" if (i + 1) in set(lac.get("kda_layers") or []) else ("mla" if mla else "full")
    types = cfg.get("layer_types")
    if types:
        kind = str(types[i])
        if kind == "sliding_attention":
            return "sliding" if cfg.get("sliding_window") else "full"
        if kind == "linear_attention":
            return "linear"
        return "mla" if mla else "full"
    if linear and cfg.get("full_attention_interval"):  # Qwen3-Next
        return "full" if (i + 1) % int(cfg.get("full_attention_interval")) == 0 else "linear"
    if cfg.get("sliding_window_pattern") and cfg.get("sliding_window"):  # Gemma 3: 5 local : 1 global
        return "full" if (i + 1) % int(cfg.get("sliding_window_pattern")) == 0 else "sliding"
    return "mla" if mla else "full"


def _mlp_kind(cfg: _Cfg, i: int, moe: MoeDims | None) -> str:
    if moe is None:
        return "dense"
    if i < int(cfg.get("first_k_dense_replace", default=0) or 0):
        return "dense"
    if i in set(cfg.get("mlp_only_layers") or []):
        return "dense"
    step = int(cfg.get("moe_layer_freq", "decoder_sparse_step", default=1) or 1)
    return "moe" if (i + 1) % step == 0 or step == 1 else "dense"


def _vision(vc: dict[str, Any] | None, text_hidden: int) -> VisionDims | None:
    if not vc:
        return None
    c = _Cfg(vc, "vision_config")
    hidden = c.get("vt_hidden_size", "hidden_size", "embed_dim")
    layers = c.get("vt_num_hidden_layers", "depth", "num_hidden_layers")
    if not hidden or not layers:
        return None
    return VisionDims(
        int(layers),
        int(hidden),
        int(c.get("vt_intermediate_size", "intermediate_size", default=4 * hidden)),
        int(c.get("text_hidden_size", "out_hidden_size", default=text_hidden)),
    )
