"""Which recipe hardware key a GPU name belongs to, and the generation whose overrides apply.
Data only; each entry says where its name pattern and grouping come from."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    key: str  # the key vLLM recipes use under `meta.hardware` / `*_overrides`
    pattern: str  # regex on the device name reported by NVML / nvidia-smi
    vendor: str  # "nvidia", "amd", "intel", "google"
    generation: str  # the `hardware_overrides` family key: "hopper", "blackwell", "amd", ...
    gpus_per_node: int  # the usual node (or NVL tray) size, used only when no GPU is visible
    source: str


_SMI = "device name as printed by nvidia-smi / NVML"
_RECIPES = "vllm-project/recipes hardware keys and hopper/blackwell/amd override families"

# Order matters: the first match wins, so GB300 precedes B300 and H200 precedes H20.
HARDWARE: tuple[Hardware, ...] = (
    Hardware("gb300", r"\bGB300\b", "nvidia", "blackwell", 4, f"{_SMI}; NVL72 trays hold 4 GPUs; {_RECIPES}"),
    Hardware("gb200", r"\bGB200\b", "nvidia", "blackwell", 4, f"{_SMI}; NVL72 trays hold 4 GPUs; {_RECIPES}"),
    Hardware("b300", r"\bB300\b", "nvidia", "blackwell", 8, f"{_SMI} ('NVIDIA B300 SXM6 AC'); HGX 8-GPU; {_RECIPES}"),
    Hardware("b200", r"\bB200\b", "nvidia", "blackwell", 8, f"{_SMI} ('NVIDIA B200'); HGX 8-GPU; {_RECIPES}"),
    Hardware("h200", r"\bH200\b", "nvidia", "hopper", 8, f"{_SMI} ('NVIDIA H200', 'NVIDIA H200 NVL'); {_RECIPES}"),
    Hardware("h100", r"\bH100\b", "nvidia", "hopper", 8, f"{_SMI} ('NVIDIA H100 80GB HBM3'); {_RECIPES}"),
    Hardware("h20", r"\bH20\b", "nvidia", "hopper", 8, f"{_SMI} ('NVIDIA H20'); {_RECIPES}"),
    Hardware("h800", r"\bH800\b", "nvidia", "hopper", 8, f"{_SMI} ('NVIDIA H800'); {_RECIPES}"),
    Hardware("a100", r"\bA100\b", "nvidia", "ampere", 8, f"{_SMI} ('NVIDIA A100-SXM4-80GB')"),
    Hardware("a800", r"\bA800\b", "nvidia", "ampere", 8, f"{_SMI} ('NVIDIA A800-SXM4-80GB')"),
    Hardware("l40s", r"\bL40S\b", "nvidia", "ada", 8, f"{_SMI} ('NVIDIA L40S')"),
    Hardware("mi355x", r"\bMI355X\b", "amd", "amd", 8, f"amd-smi product name; {_RECIPES}"),
    Hardware("mi350x", r"\bMI350X\b", "amd", "amd", 8, f"amd-smi product name; {_RECIPES}"),
    Hardware("mi325x", r"\bMI325X\b", "amd", "amd", 8, f"amd-smi product name; {_RECIPES}"),
    Hardware("mi300x", r"\bMI300X\b", "amd", "amd", 8, f"amd-smi product name; {_RECIPES}"),
    Hardware("xeon6", r"\bXeon\b.*\b6\d{3}", "intel", "cpu", 2, f"{_RECIPES} (Llama-3.1-8B: 2 NUMA nodes)"),
    Hardware("arc_pro_b60", r"\bArc\b.*\bB60\b", "intel", "xpu", 1, _RECIPES),
    Hardware("arc_pro_b70", r"\bArc\b.*\bB70\b", "intel", "xpu", 1, _RECIPES),
    Hardware("trillium", r"(?!)", "google", "tpu", 8, f"{_RECIPES} (TPU v6e; not detectable here)"),
    Hardware("ironwood", r"(?!)", "google", "tpu", 4, f"{_RECIPES} (TPU v7; not detectable here)"),
)

BY_KEY = {h.key: h for h in HARDWARE}


def identify(device_name: str) -> str | None:
    """The recipe hardware key for a device name, or None when we do not know it."""
    for hw in HARDWARE:
        if re.search(hw.pattern, device_name, re.IGNORECASE):
            return hw.key
    return None


def override_keys(key: str) -> tuple[str, ...]:
    """The `hardware_overrides` keys that apply to this hardware, least specific first."""
    hw = BY_KEY.get(key)
    if hw is None:
        return (key,)
    keys: list[str] = []
    for k in (hw.vendor, hw.generation, hw.key):
        if k not in keys:
            keys.append(k)
    return tuple(keys)
