"""Which attention layers vLLM gives a sliding window, model class by model class (0.32-0.34).

vLLM decides it in two steps:
1. the model file passes a `per_layer_sliding_window` to `Attention`, or does not;
2. `Attention.__init__` falls back to `CacheConfig.sliding_window`, which
   `EngineArgs.create_engine_config` sets to the model's window only when the config's `layer_types`
   is absent or all "sliding_attention", so that it cannot turn the full layers of an interleaved
   model into sliding ones (vllm/engine/arg_utils.py; vllm/model_executor/layers/attention/attention.py).
The `layer_types` of step 2 is the one the transformers config class holds: several classes write one
when config.json has none (Qwen2Config, Qwen2MoeConfig, GptOssConfig, Gemma 3), and that decides it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Model files that pass no per-layer window: every layer takes CacheConfig.sliding_window
# (vllm/model_executor/models/mixtral.py, qwen2.py, qwen2_moe.py, qwen3_moe.py, 0.32-0.34).
MODEL_WINDOW_ONLY = frozenset({"MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"})
# gpt_oss.py OAIAttention._build_attention: the window on even layers, whatever layer_types says.
EVEN_LAYER_WINDOW = frozenset({"GptOssForCausalLM"})
# openpangu.py: windows come from `interleaved_sliding_window` (an int, or a list indexed by layer
# modulo its length); with `param_sink_number` > 0 every layer is OpenPanguSinkAttention, whose
# SinkFullAttentionSpec carries no window (static_sink_attention.py get_kv_cache_spec).
PANGU = frozenset({"PanguEmbeddedForCausalLM", "PanguProMoEV2ForCausalLM", "PanguUltraMoEForCausalLM"})
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class Windows:
    per_layer: tuple[int | None, ...]  # the window of each layer; None: full attention
    notes: tuple[str, ...]


def model_window(config: Mapping[str, object]) -> int | None:
    """The model-level window: `sliding_window`, unless `use_sliding_window` is false or the window is 0
    (ModelConfig: "sliding_window 0 means no sliding window")."""
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False or not isinstance(window, int) or window <= 0:
        return None
    return window


def transformers_layer_types(model_type: str, config: Mapping[str, object], n: int) -> list[str] | None:
    """`layer_types` as the transformers config class holds it (transformers 5 `__post_init__`)."""
    given = config.get("layer_types")
    if isinstance(given, list) and given:
        return [str(t) for t in given]
    on = config.get("use_sliding_window") is True
    max_window = config.get("max_window_layers")
    top = max_window if isinstance(max_window, int) else 28  # both Qwen2 classes default to 28
    if model_type == "qwen2_moe":  # Qwen2MoeConfig: even layers below max_window_layers
        return [SLIDING if on and i % 2 == 0 and i < top else "full_attention" for i in range(n)]
    if model_type == "qwen2":  # Qwen2Config: layers from max_window_layers on
        return [SLIDING if on and i >= top else "full_attention" for i in range(n)]
    if model_type == "gpt_oss":  # GptOssConfig: even layers
        return [SLIDING if i % 2 == 0 else "full_attention" for i in range(n)]
    pattern = config.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:  # Gemma 3: pattern - 1 local layers, then a global one
        return ["full_attention" if (i + 1) % pattern == 0 else SLIDING for i in range(n)]
    return None


def layer_windows(architecture: str, model_type: str, config: Mapping[str, object], sliding: Sequence[bool]) -> Windows:
    """The window vLLM gives each layer. `sliding[i]`: the config marks layer i sliding (layer_types,
    or Gemma 3's pattern); used by model classes that pass their own per-layer window."""
    n, window = len(sliding), model_window(config)
    types = transformers_layer_types(model_type, config, n)
    cache_window = window if types is None or all(t == SLIDING for t in types) else None
    per_layer: list[int | None]
    notes: list[str] = []
    if architecture in PANGU and sink_tokens(config):
        per_layer, cache_window = [None] * n, None  # SinkFullAttentionSpec: no window on any layer
    elif architecture in PANGU:
        per_layer = _pangu(config, n)
    elif architecture in MODEL_WINDOW_ONLY:
        per_layer = [None] * n
        if window and cache_window is None:
            notes.append(
                f"sliding_window {window} is not applied: {architecture} takes only the model-level window, "
                "which vLLM leaves unset when layer_types mixes sliding and full layers (arg_utils.py)"
            )
    elif architecture in EVEN_LAYER_WINDOW:
        per_layer = [window if i % 2 == 0 else None for i in range(n)]
    else:
        per_layer = [window if s else None for s in sliding]
    if cache_window and not any(per_layer):
        notes.append(
            f"sliding_window {window} is set without layer_types: vLLM applies it to every attention "
            "layer (Attention.__init__ falls back to cache_config.sliding_window)"
        )
    return Windows(tuple(w or cache_window for w in per_layer), tuple(notes))


def sink_tokens(config: Mapping[str, object]) -> int:
    """openPangu's static sink tokens per layer (`param_sink_number`; 0: no sink attention)."""
    sinks = config.get("param_sink_number")
    return sinks if isinstance(sinks, int) and sinks > 0 else 0


def _pangu(config: Mapping[str, object], n: int) -> list[int | None]:
    interleaved = config.get("interleaved_sliding_window")
    if isinstance(interleaved, int):
        return [interleaved] * n
    if isinstance(interleaved, list) and interleaved:
        return [_window_or_none(interleaved[i % len(interleaved)]) for i in range(n)]
    return [None] * n


def _window_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
