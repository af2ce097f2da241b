"""Weight formats and the quantization scheme of a checkpoint: bits per parameter (scales
included) and which modules a scheme leaves unquantized (its ignore list)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from oomkit.errors import InputError
from oomkit.serial import JsonObject


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits_per_param: float  # payload plus per-group scales / zero points
    source: str


# Effective storage per parameter, scales included.
FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", 32.0, "IEEE float32"),
        WeightFormat("bf16", 16.0, "bfloat16"),
        WeightFormat("fp16", 16.0, "float16"),
        WeightFormat(
            "fp8",
            8.0 + 32 / (128 * 128),
            "fp8 e4m3 with one fp32 scale per 128x128 block (DeepSeek-V3 style weight_block_size)",
        ),
        WeightFormat("int8", 8.0 + 32 / 4096, "int8 W8A8, one fp32 scale per output channel (~4096 inputs)"),
        WeightFormat(
            "int4-g32",
            4.0 + 16 / 32,
            "compressed-tensors pack-quantized int4, group 32, bf16 scale per group (Kimi K2.5)",
        ),
        WeightFormat("awq", 4.0 + (16 + 4) / 128, "AWQ int4, group 128: fp16 scale and 4-bit zero point per group"),
        WeightFormat(
            "gptq", 4.0 + (16 + 4) / 128, "GPTQ int4, group 128: fp16 scale and packed 4-bit zero point per group"
        ),
        WeightFormat("mxfp4", 4.25, "OCP MX FP4: 4-bit e2m1 plus one 8-bit e8m0 scale per 32 (gpt-oss, Kimi K3)"),
        WeightFormat("nvfp4", 4.5, "NVFP4: 4-bit e2m1 plus one fp8 e4m3 scale per 16 (NVIDIA ModelOpt)"),
    )
}

# Names accepted on the command line (`--quantization`, as vLLM spells them) -> format.
CLI_NAMES = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "int8": "int8",
    "bitsandbytes": "int8",
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "int4": "int4-g32",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "bf16": "bf16",
    "fp16": "fp16",
    "none": "bf16",
}

DTYPE_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


@dataclass(frozen=True)
class QuantScheme:
    """How a checkpoint stores its Linear weights. `ignore` holds the scheme's exclusion patterns
    (compressed-tensors `re:` regexes, ModelOpt globs, HF `modules_to_not_convert` names)."""

    linear_format: str  # format of quantized Linear layers
    base_format: str  # format of everything the scheme leaves alone (the model dtype)
    method: str
    ignore: tuple[str, ...] = ()
    source: str = "config.json quantization_config"
    quantizes_experts_only: bool = False

    def format_for(self, module_names: tuple[str, ...], is_linear: bool) -> str:
        """Format of a module; `module_names` are equivalent spellings of its name."""
        if not is_linear or self.linear_format == self.base_format:
            return self.base_format
        if self.quantizes_experts_only and not any(".experts." in n for n in module_names):
            return self.base_format
        ignored = _ignore_matcher(tuple(p for p in self.ignore if isinstance(p, str)))  # hashable
        if any(ignored(n) for n in module_names):
            return self.base_format
        return self.linear_format

    def to_dict(self) -> JsonObject:
        return {
            "method": self.method,
            "linear_format": self.linear_format,
            "base_format": self.base_format,
            "ignore": list(self.ignore),
            "source": self.source,
        }


PATTERN_LIMIT = 512
"""Characters in one ignore pattern: real ones are module paths (under 100); a longer one is no
module name, and fnmatch or re on a pattern of many KB can take minutes."""


@lru_cache(maxsize=64)
def _ignore_matcher(ignore: tuple[str, ...]) -> Callable[[str], bool]:
    """One compiled test for a scheme's whole ignore list: ModelOpt checkpoints list over a thousand
    globs, and trying each per module name costs seconds per plan."""
    parts = [r for r in map(_pattern_regex, ignore) if r is not None]
    if not parts:
        return lambda name: False
    try:
        combined = re.compile("|".join(f"(?:{r})" for r in parts))
        return lambda name: combined.match(name) is not None
    except re.error:  # e.g. a `re:` pattern with a global flag in the middle: test one by one
        each = [re.compile(r) for r in parts]
        return lambda name: any(r.match(name) for r in each)


def _pattern_regex(pattern: str) -> str | None:
    """A regex that re.match-es the module names the pattern ignores; None for no usable pattern."""
    if not pattern or len(pattern) > PATTERN_LIMIT:
        return None
    if pattern.startswith("re:"):
        try:
            re.compile(pattern[3:])
        except re.error:  # vLLM would refuse the pattern too; it ignores nothing
            return None
        return pattern[3:]
    if any(ch in pattern for ch in "*?["):
        return f"{fnmatch.translate(pattern)}|{fnmatch.translate(pattern + '.*')}"
    # A plain name matches whole dot-separated components (HF `modules_to_not_convert` style):
    # "gate" matches "...mlp.gate" but not "...mlp.gate_proj".
    return rf"(?s:(?:.*\.)?{re.escape(pattern)}(?:\..*)?)\Z"


def _names(value: object) -> tuple[str, ...]:
    """An ignore list as its patterns: the strings of a list (anything else in it ignores nothing).
    A number or an object where the list belongs is the wrong type (TypeError -> InputError)."""
    if not value:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise TypeError(f"an ignore list is a {type(value).__name__}")
    return tuple(v for v in value if isinstance(v, str))


def _object(value: object) -> Mapping[str, object]:
    """A JSON object field; absent or empty is {}, any other type is the wrong type."""
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def scheme_from_config(qcfg: Mapping[str, object] | None, model_dtype: str) -> QuantScheme:
    base = DTYPE_FORMATS.get(model_dtype, "bf16")
    if not qcfg:
        return QuantScheme(base, base, "none", source="no quantization_config: model dtype")
    method = str(qcfg.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        return _compressed_tensors(qcfg, base)
    if method in ("fp8", "fbgemm_fp8"):
        ignore = _names(qcfg.get("modules_to_not_convert") or qcfg.get("ignored_layers"))
        return QuantScheme("fp8", base, method, ignore)
    if method == "mxfp4":
        return QuantScheme("mxfp4", base, method, _names(qcfg.get("modules_to_not_convert")))
    if method in ("awq", "gptq"):
        return QuantScheme(
            method, "fp16" if base == "fp32" else base, method, _names(qcfg.get("modules_to_not_convert"))
        )
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(qcfg.get("quant_algo", "")).lower()
        fmt = "nvfp4" if "fp4" in algo else "fp8"
        return QuantScheme(fmt, base, method, _names(qcfg.get("exclude_modules") or qcfg.get("ignore")))
    if method in ("bitsandbytes",):
        return QuantScheme("int8", base, method)
    if not method and "config_groups" in qcfg:
        return _compressed_tensors(qcfg, base)
    raise InputError(
        f"quantization method {method!r} in the config is not known to the planner",
        hint="pass --quantization with one of " + ", ".join(sorted(CLI_NAMES)),
    )


def _compressed_tensors(qcfg: Mapping[str, object], base: str) -> QuantScheme:
    groups = [_object(g) for g in _object(qcfg.get("config_groups")).values()]
    if not groups:
        return QuantScheme(base, base, "compressed-tensors")
    # Several groups are rare; the first one with weights defines the Linear format.
    weights = next((_object(g.get("weights")) for g in groups if g.get("weights")), {})
    fmt_name = str(qcfg.get("format") or groups[0].get("format") or "")
    bits = _whole(weights.get("num_bits", 16))
    kind = str(weights.get("type", "int"))
    group = weights.get("group_size")
    if "mxfp4" in fmt_name or (kind == "float" and bits == 4 and group == 32):
        fmt = "mxfp4"
    elif kind == "float" and bits == 4:
        fmt = "nvfp4"
    elif kind == "float" and bits == 8:
        fmt = "fp8"
    elif bits == 8:
        fmt = "int8"
    elif bits == 4:
        fmt = "int4-g32" if group == 32 else "gptq"
    else:
        fmt = base
    return QuantScheme(fmt, base, "compressed-tensors", _names(qcfg.get("ignore")))


def _whole(value: object) -> int:
    if not isinstance(value, int | float | str):
        raise TypeError(f"num_bits is a {type(value).__name__}, not a number")
    return int(value)


def scheme_from_cli(name: str, model_dtype: str, checkpoint: QuantScheme) -> QuantScheme:
    """`--quantization NAME`: the named method for every Linear layer. When it names the
    checkpoint's own format the checkpoint's ignore list still applies."""
    key = name.lower()
    if key not in CLI_NAMES:
        raise InputError(f"unknown --quantization {name!r}", hint="use one of " + ", ".join(sorted(CLI_NAMES)))
    fmt = CLI_NAMES[key]
    if fmt == checkpoint.linear_format:
        return checkpoint
    base = DTYPE_FORMATS.get(model_dtype, "bf16")
    return QuantScheme(fmt, base, f"--quantization {name}", (), source="command line")


def bytes_for(params: int, fmt: str) -> int:
    return int(params * FORMATS[fmt].bits_per_param / 8)


@dataclass(frozen=True)
class KvDtype:
    name: str
    bytes_per_elem: float
    source: str
    mla_bytes_per_token: int | None = None  # opaque sparse-MLA layouts
    affects_state: bool = False


KV_DTYPES: dict[str, KvDtype] = {
    k.name: k
    for k in (
        KvDtype("bfloat16", 2, "bf16 cache"),
        KvDtype("float16", 2, "fp16 cache"),
        KvDtype("fp8", 1, "fp8 e4m3 cache (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE)"),
        KvDtype("fp8_e4m3", 1, "fp8 e4m3 cache"),
        KvDtype("fp8_e5m2", 1, "fp8 e5m2 cache"),
        KvDtype("fp8_ds_mla", 1, "FlashMLA-sparse packed layout, 656 B per token (mla_attention.py)", 656),
        KvDtype(
            "nvfp4", 0.5625, "NVFP4 cache: 4 bits plus an fp8 scale per 16 (approximate; the backend owns the layout)"
        ),
    )
}


def resolve_kv_dtype(name: str, model_dtype: str) -> KvDtype:
    key = name.lower()
    if key == "auto":
        key = "float16" if model_dtype in ("float16", "half") else "bfloat16"
    if key not in KV_DTYPES:
        raise InputError(f"unknown --kv-cache-dtype {name!r}", hint="use auto, " + ", ".join(sorted(KV_DTYPES)))
    return KV_DTYPES[key]
