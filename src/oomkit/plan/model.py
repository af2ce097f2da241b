"""Model shape from a Hugging Face config.json: the layer kinds and dimensions the planner needs.

Field names follow the published configs (Llama, Qwen3/3.5/Next, DeepSeek V3/V3.2, Kimi K2/K3,
gpt-oss, Mixtral, Qwen2/3-MoE, Nemotron-H, Gemma 3, openPangu); the layer typing follows how vLLM
0.32-0.34 builds each model (source notes inline; sliding windows: oomkit.plan.windows). The raw
config.json is read through oomkit.plan.config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass

from oomkit.errors import InputError
from oomkit.plan.config import ConfigReader as _Cfg
from oomkit.plan.config import as_int as _int
from oomkit.plan.quant import QuantScheme, scheme_from_config
from oomkit.plan.windows import PANGU, layer_windows, sink_tokens
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
    head_dim: int  # the K head (and the V head unless v_head_dim says otherwise)
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
    v_head_dim: int | None = None  # a V head unlike the K head (openPangu sink attention: v_channels)
    sink_tokens: int = 0  # openPangu static sink tokens (param_sink_number); GPT-OSS sinks hold no KV
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


def shape_from_config(
    data: Mapping[str, object], name: str, source: str, overrides: Mapping[str, object] | None = None
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


def _check_counts(obj: object, name: str) -> None:
    """Every `int` field of the shape holds a whole number within MAX_COUNT: a list, a string or 10**400
    that a config passed through is refused here, not deep inside the planner."""
    if not is_dataclass(obj) or isinstance(obj, type):
        return
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


def _shape(data: Mapping[str, object], name: str, source: str, overrides: Mapping[str, object] | None) -> ModelShape:
    outer = _Cfg(data, f"config of {name}")
    text = dict(outer.mapping("text_config") or data)
    text.update(overrides or {})
    cfg = _Cfg(text, f"config of {name}")
    qcfg = cfg.mapping("quantization_config") or outer.mapping("quantization_config")
    dtype = cfg.text("torch_dtype", "dtype", default=outer.text("torch_dtype", "dtype", default="bfloat16"))
    hidden = cfg.need_num("hidden_size")
    n_layers = cfg.need_num("num_hidden_layers", "num_layers")
    if not 0 < n_layers <= MAX_LAYERS:  # a flipped digit must not build a billion-layer table
        raise InputError(
            f"config of {name}: num_hidden_layers {n_layers} is outside 1..{MAX_LAYERS}",
            hint="fix num_hidden_layers in the config",
        )
    heads = cfg.need_num("num_attention_heads")
    arch = outer.first("architectures") or cfg.first("architectures") or "unknown"
    model_type = cfg.text("model_type", default=outer.text("model_type", default=""))
    mla = _mla(cfg)
    sinks = sink_tokens(text) if arch in PANGU and mla is None else 0
    linear = _linear(cfg)
    moe = _moe(cfg)
    layers, notes = _layers(cfg, n_layers, mla, linear, moe, arch, model_type)
    if sinks:  # OpenPanguSinkAttention: K head qk_rope_dim + qk_nope_dim, V head v_channels
        head_dim, v_head_dim = cfg.need_num("qk_rope_dim") + cfg.need_num("qk_nope_dim"), cfg.need_num("v_channels")
        notes.append(
            f"{sinks} static sink tokens per layer (SinkFullAttentionSpec): full attention on every layer, "
            "no blocks of the pool counted for them from vLLM 0.30"
        )
    else:
        head_dim, v_head_dim = cfg.num("head_dim", "attention_head_dim", default=hidden // heads), None
    if arch == "GptOssForCausalLM":
        notes.append("attention sinks: one learned logit per head, no KV (Attention(sinks=...))")
    return ModelShape(
        name=name,
        source=source,
        architecture=arch,
        model_type=model_type,
        dtype=dtype,
        hidden_size=hidden,
        vocab_size=cfg.need_num("vocab_size"),
        max_position_embeddings=cfg.whole(
            "max_position_embeddings", "max_sequence_length", "seq_length", name="max_position_embeddings"
        ),
        num_attention_heads=heads,
        num_kv_heads=cfg.num("num_key_value_heads", default=heads),
        head_dim=head_dim,
        intermediate_size=cfg.num("intermediate_size", default=4 * hidden),
        layers=layers,
        quant=scheme_from_config(qcfg, dtype),
        mlp_gated=cfg.text("mlp_hidden_act", "hidden_act", default="silu") != "relu2",
        attn_output_gate=cfg.flag("attn_output_gate"),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        mla=mla,
        linear=linear,
        moe=moe,
        vision=_vision(outer.mapping("vision_config"), hidden),
        mtp_layers=cfg.num("num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)
        or (cfg.num("num_mtp_modules", default=0) if cfg.get("use_mtp") else 0),
        ssm_dtype_hint=cfg.opt_text("mamba_ssm_dtype", "mamba_ssm_cache_dtype"),
        v_head_dim=v_head_dim,
        sink_tokens=sinks,
        notes=tuple(notes),
    )


def _mla(cfg: _Cfg) -> MlaDims | None:
    kv_lora_rank = cfg.opt_num("kv_lora_rank")
    if kv_lora_rank is None:
        return None
    return MlaDims(
        q_lora_rank=cfg.whole("q_lora_rank", name="q_lora_rank"),
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=cfg.need_num("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.need_num("qk_nope_head_dim"),
        v_head_dim=cfg.need_num("v_head_dim"),
        output_gate=cfg.flag("mla_use_output_gate"),
        indexer_head_dim=cfg.whole("index_head_dim", name="indexer_head_dim"),
        indexer_heads=cfg.whole("index_n_heads", name="indexer_heads"),
    )


def _linear(cfg: _Cfg) -> LinearAttnDims | None:
    lac = cfg.mapping("linear_attn_config")
    if lac:  # Kimi Linear / K3 (vllm/model_executor/layers/mamba/mamba_utils.py kda_state_shape)
        kda = _Cfg(lac, "linear_attn_config")
        return LinearAttnDims(
            "kda",
            _int(lac["num_heads"]),
            _int(lac["head_dim"]),
            kda.num("short_conv_kernel_size", default=4),
            full_rank_gate=kda.flag("use_full_rank_gate"),
        )
    if cfg.get("linear_num_value_heads") is not None:  # Qwen3-Next / Qwen3.5 gated delta net
        return LinearAttnDims(
            "gdn",
            cfg.need_num("linear_num_value_heads"),
            cfg.need_num("linear_value_head_dim"),
            cfg.num("linear_conv_kernel_dim", default=4),
            num_k_heads=cfg.need_num("linear_num_key_heads"),
            head_k_dim=cfg.need_num("linear_key_head_dim"),
        )
    if cfg.get("hybrid_override_pattern") is not None:  # Nemotron-H mamba2
        return LinearAttnDims(
            "mamba2",
            cfg.need_num("mamba_num_heads"),
            cfg.need_num("mamba_head_dim"),
            cfg.num("conv_kernel", default=4),
            n_groups=cfg.need_num("n_groups"),
            state_size=cfg.need_num("ssm_state_size"),
        )
    return None


def _moe(cfg: _Cfg) -> MoeDims | None:
    experts = cfg.get("n_routed_experts", "num_local_experts", "num_experts")
    if not experts:
        return None
    topk = cfg.need_num("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts")
    inter = _int(cfg.get("moe_intermediate_size", "intermediate_size"))
    shared = cfg.num("n_shared_experts", "num_shared_experts", default=0)
    shared_inter = cfg.opt_num(
        "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "shared_intermediate_size"
    )
    if shared_inter and not shared:
        shared = 1  # Qwen3-Next / Nemotron: one shared expert of the given width
    return MoeDims(
        _int(experts),
        topk,
        inter,
        shared,
        (shared_inter or inter) if shared else 0,
        latent_hidden=cfg.whole("routed_expert_hidden_size", name="latent_hidden"),
        gated=cfg.text("mlp_hidden_act", "hidden_act", default="silu") != "relu2",
    )


def _layers(
    cfg: _Cfg,
    n: int,
    mla: MlaDims | None,
    linear: LinearAttnDims | None,
    moe: MoeDims | None,
    arch: str,
    model_type: str,
) -> tuple[tuple[Layer, ...], list[str]]:
    pattern = cfg.get("hybrid_override_pattern")
    if pattern:  # Nemotron-H: M mamba, * attention, - dense MLP, E MoE; one char per layer
        kinds = {"M": ("linear", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
        if not isinstance(pattern, str):
            raise TypeError(f"hybrid_override_pattern is a {type(pattern).__name__}, not a string")
        if len(pattern) != n:
            raise InputError(f"hybrid_override_pattern has {len(pattern)} entries for {n} layers")
        return tuple(Layer(i, *kinds[ch]) for i, ch in enumerate(pattern)), []
    attn = [_attn_kind(cfg, i, mla, linear) for i in range(n)]
    # Which full/sliding layers vLLM gives a window depends on the model class (oomkit.plan.windows).
    windows = layer_windows(arch, model_type, cfg.data, [kind == "sliding" for kind in attn])
    mlp = [_mlp_kind(cfg, i, moe) for i in range(n)]
    layers = []
    for i, (kind, window) in enumerate(zip(attn, windows.per_layer, strict=True)):
        if kind in ("full", "sliding"):
            kind = "sliding" if window else "full"
        layers.append(Layer(i, kind, mlp[i], window if kind == "sliding" else None))
    return tuple(layers), list(windows.notes)


def _attn_kind(cfg: _Cfg, i: int, mla: MlaDims | None, linear: LinearAttnDims | None) -> str:
    lac = cfg.mapping("linear_attn_config")
    if lac:  # 1-based layer lists (KimiLinearConfig.is_kda_layer)
        return "linear" if (i + 1) in _Cfg(lac, "linear_attn_config").ints("kda_layers") else ("mla" if mla else "full")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        kind = str(types[i])
        if kind == "sliding_attention":
            return "sliding" if cfg.get("sliding_window") else "full"
        if kind == "linear_attention":
            return "linear"
        return "mla" if mla else "full"
    interval = cfg.opt_num("full_attention_interval")
    if linear and interval:  # Qwen3-Next
        return "full" if (i + 1) % interval == 0 else "linear"
    swa_pattern = cfg.opt_num("sliding_window_pattern")
    if swa_pattern and cfg.get("sliding_window"):  # Gemma 3: 5 local : 1 global
        return "full" if (i + 1) % swa_pattern == 0 else "sliding"
    return "mla" if mla else "full"


def _mlp_kind(cfg: _Cfg, i: int, moe: MoeDims | None) -> str:
    if moe is None:
        return "dense"
    if i < (cfg.opt_num("first_k_dense_replace") or 0):
        return "dense"
    if i in cfg.ints("mlp_only_layers"):
        return "dense"
    step = cfg.opt_num("moe_layer_freq", "decoder_sparse_step") or 1
    return "moe" if (i + 1) % step == 0 or step == 1 else "dense"


def _vision(vc: Mapping[str, object] | None, text_hidden: int) -> VisionDims | None:
    if not vc:
        return None
    c = _Cfg(vc, "vision_config")
    hidden = c.opt_num("vt_hidden_size", "hidden_size", "embed_dim")
    layers = c.opt_num("vt_num_hidden_layers", "depth", "num_hidden_layers")
    if not hidden or not layers:
        return None
    return VisionDims(
        layers,
        hidden,
        c.num("vt_intermediate_size", "intermediate_size", default=4 * hidden),
        c.num("text_hidden_size", "out_hidden_size", default=text_hidden),
    )
