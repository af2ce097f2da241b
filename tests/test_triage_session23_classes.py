"""Classes of session 23 (issue 13). An exception that names a library, kernel build, backend or device the
installation lacks ("NIXL is not available", "vllm_flashmla_C is not available, likely was not compiled") is the
environment. A process that printed the exception it died of before its parent reported it gone logged its cause: the
exception places the failure, not "died without a cause". PyTorch's expandable segments failing to map memory with OOM,
and Intel Gaudi's bridge failing to allocate its device workspace, are out-of-memory lines. A setting's bound written
as a range ("must be 32000 >= vocab_size <= 33024") and a feature that "hasn't supported" something yet are refusals
of the settings, as is a checkpoint's remote code (`transformers_modules`) without the class the library asks for. A
vLLM module's own "module 'vllm.x' has no attribute" template no longer claims every module's AttributeError (the
knowledge generator keeps `__name__` and `__package__`)."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

CASES = {
    "a_missing_library_named_in_an_exception_is_the_environment": Case(
        "(EngineCore_DP1 pid=754) ERROR 01-12 17:11:19 [core.py:936] RuntimeError: NIXL is not available\n",
        "environment",
        False,
    ),
    "a_kernel_build_that_is_not_available_is_the_environment": Case(
        "RuntimeError: vllm_flashmla_C is not available, likely was not compiled due to insufficient nvcc version or a "
        "supported arch was not in the list of target arches to compile for.\n",
        "environment",
        False,
    ),
    "a_device_that_is_not_available_is_the_environment": Case(
        "ValueError: The requested device for vllm (cuda:1) is not available. You are likely using vLLM without "
        "restricting the number of GPUs for training.\n",
        "environment",
        False,
    ),
    "an_exception_before_the_engines_death_is_its_cause": Case(
        '  File "/usr/lib/python3.10/site-packages/vllm/multimodal/processing.py", line 1652, in '
        "_apply_prompt_updates\n"
        "    assert update_idx is not None, (\n"
        "AssertionError: Failed to apply prompt replacement for mm_items['image'][0]\n"
        "ERROR 09-09 03:01:31 [core_client.py:562] Engine core proc EngineCore_0 died unexpectedly, shutting down "
        "client.\n",
        "not_oom_other",
        False,
    ),
    "a_death_with_nothing_before_it_still_has_no_cause": Case(
        "ERROR 09-09 03:01:31 [core_client.py:562] Engine core proc EngineCore_0 died unexpectedly, shutting down "
        "client.\n"
        "RuntimeError: Engine core proc EngineCore_0 died unexpectedly\n",
        "unknown",
        False,
    ),
    "expandable_segments_failing_to_map_memory_is_out_of_memory": Case(
        "[rank0]:[W905 00:28:47 CUDACachingAllocator.cpp:508] expandable_segments: memory mapping failed with OOM on "
        "device 0 while trying to map 20971520 bytes (free: 4521984, total: 101971460096)\n",
        "serving_prefill",
        True,
        "low",
    ),
    "gaudis_workspace_allocation_failing_is_out_of_memory": Case(
        "ERROR 09-10 02:01:57 async_llm_engine.py:43] RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_SYNHELPER "
        "workspace Allocation of size ::52561502464 failed!\n",
        "serving_prefill",
        True,
        "low",
    ),
    "a_bound_written_as_a_range_is_a_refused_setting": Case(
        "ValueError: When using LoRA, vocab size must be 32000 >= vocab_size <= 33024\n",
        "environment",
        False,
    ),
    "a_feature_not_supported_yet_is_a_refused_setting": Case(
        "(RayWorkerWrapper pid=11033) ERROR 08-19 16:07:35 worker_base.py:438] ValueError: GGUF quantization hasn't "
        "supported tensor parallelism yet. [repeated 2x across cluster]\n",
        "environment",
        False,
    ),
    "a_remote_code_modules_missing_class_is_the_environment": Case(
        "ERROR 06-06 11:18:00 [core.py:500] AttributeError: module 'transformers_modules.jinaai.xlm-roberta-flash-"
        "implementation.2b6bc3f30750.modeling_xlm_roberta' has no attribute 'XLMRobertaForPreTraining'\n",
        "environment",
        False,
    ),
    "a_number_that_must_be_reached_is_not_a_refusal_without_a_comparison": Case(
        "ValueError: batch 3 must be 32000 tokens long\n",
        "not_oom_other",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session23_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
