"""Classes of session 29 (issue 13). A table keyed by the platform with no row for this one (`KeyError:
<PlatformEnum.HPU: 4>` from the quantization kernels' `_POSSIBLE_KERNELS[current_platform._enum]`) is the platform
lacking the feature: the environment, though the model's construction raised it. The KV-cache coordinator and managers
are built once, with the scheduler, from the KV-cache groups the start-up sized: what their constructors raise is KV
cache allocation. An exception no frame or marker places and that is worded as a refusal of a setting ("does not
support LoRA yet") is the environment even where vLLM's source raises it in a loading step."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

SITE = "/usr/local/lib/python3.12/dist-packages/vllm"
CASES = {
    "a_platform_with_no_kernel_row_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/model_executor/layers/quantization/compressed_tensors/schemes/'
        'compressed_tensors_w8a8_int8.py", line 51, in create_weights\n'
        "    kernel_type = choose_scaled_mm_linear_kernel(scaled_mm_linear_kernel_config)\n"
        f'  File "{SITE}/model_executor/layers/quantization/kernels/scaled_mm/__init__.py", line 57, in '
        "choose_scaled_mm_linear_kernel\n"
        "    for kernel in _POSSIBLE_KERNELS[current_platform._enum]:\n"
        "KeyError: <PlatformEnum.HPU: 4>\n",
        "environment",
        False,
    ),
    "the_kv_coordinators_own_check_is_kv_cache_allocation": Case(
        "  AssertionError: HybridKVCacheCoordinator requires at least two attention groups.\n",
        "kv_cache_allocation",
        False,
        "low",
    ),
    "a_traceback_through_the_kv_managers_constructor_is_kv_cache_allocation": Case(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/v1/core/sched/scheduler.py", line 180, in __init__\n'
        "    self.kv_cache_manager = KVCacheManager(\n"
        f'  File "{SITE}/v1/core/kv_cache_manager.py", line 110, in __init__\n'
        "    self.coordinator = get_kv_cache_coordinator(\n"
        f'  File "{SITE}/v1/core/kv_cache_coordinator.py", line 520, in get_kv_cache_coordinator\n'
        "    return HybridKVCacheCoordinator(\n"
        "ValueError: the groups' block sizes disagree\n",
        "kv_cache_allocation",
        False,
    ),
    "a_lora_refusal_raised_while_loading_is_the_environment": Case(
        "AssertionError: Llama4ForConditionalGeneration does not support LoRA yet.\n",
        "environment",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session29_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
