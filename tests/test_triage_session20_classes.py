"""Classes of session 20 (issue 13). A traceback frame whose `line N, in func` a paste spread with runs of spaces
(GitHub's rendering of a hard-wrapped terminal copy) is still a frame, so a cut traceback through the weights'
post-processing is weight loading. The second paragraph of Transformers' refusal of an unknown model type ("You can
update Transformers with the command ..."), on a line of its own, is the environment. FastChat's
log format ("date | ERROR | stderr | <line>") is a wrapper around vLLM's lines, and a wrapper reading an attribute vLLM's
engine object no longer has (FastChat's worker reading `.engine` of V1's AsyncLLM) is the environment: the wrapper was
built for another vLLM. CANN's report of an AI-core or AI-vector kernel fault (EZ9999, "The DDR address of the MTE
instruction is out of range") is Ascend's illegal memory access, not memory; its "notify wait timeout" on a device
stream is HCCL's ranks waiting on each other: the network. A parameter no checkpoint tensor filled, in the older
wording of a model's own check ("Some weights are not initialized from checkpoints"), is weight loading. A setting's
bound as the config checks word it ("max_num_batched_tokens must be <= 65528 when LoRA is enabled"), with nothing
placing it and no serving in the log, is the environment; a kernel's runtime assert ("must be provided") is not.
AutoWeightsLoader's "There is no module or parameter named X in Y" is weight loading when a retyped paste changed the
quotes around X. The scheduler terminating a request whose grammar rejected its sampled tokens is one request's error
(E-REQBAD), however healthy the server around it."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

WORKER = "ERROR 03-22 06:48:14 [worker_base.py:620] "
SITE = "/usr/local/lib/python3.12/dist-packages/vllm"

CASES = {
    "a_frame_spread_by_spaces_is_still_a_frame": Case(
        f"{WORKER}    _process_weights_after_loading(model, model_config, target_device)\n"
        f'{WORKER}  File "{SITE}/attention/backends/mla/common.py", line 1101,                       in '
        "process_weights_after_loading\n"
        f"{WORKER}    kv_b_proj_weight = get_and_maybe_dequant_weights(self.kv_b_proj).T\n"
        f'{WORKER}  File "{SITE}/attention/backends/mla/common.py", li\n',
        "weight_loading",
        False,
        "low",
    ),
    "transformers_advice_to_upgrade_is_the_environment": Case(
        "ERROR 03-20 10:37:00 engine.py:389] You can update Transformers with the command `pip install --upgrade "
        "transformers`. If this does not work, and the checkpoint is very new, then there may not be a release "
        "version that supports this model yet.\n"
        "Process SpawnProcess-1:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 794, '
        "in __getitem__\n"
        "    raise KeyError(key)\n"
        "KeyError: 'gemma3'\n",
        "environment",
        False,
        "high",
    ),
    "a_wrapper_reading_an_engine_attribute_vllm_dropped_is_the_environment": Case(
        "".join(
            f"2025-03-24 22:04:27 | ERROR | stderr | {line}\n"
            for line in (
                "Traceback (most recent call last):",
                '  File "/p/FastChat/fastchat/serve/vllm_worker.py", line 291, in <module>',
                "    worker = VLLMWorker(",
                '  File "/p/FastChat/fastchat/serve/vllm_worker.py", line 57, in __init__',
                "    self.tokenizer = llm_engine.engine.tokenizer",
                "AttributeError: 'AsyncLLM' object has no attribute 'engine'",
            )
        ),
        "environment",
        False,
        "low",
    ),
    "canns_aivector_kernel_fault_is_a_crash": Case(
        "[rank1]:[W914 11:34:43.452457787 compiler_depend.ts:57] Warning: EZ9999: Inner Error!\n"
        "EZ9999: [PID: 37027] 2025-09-14-11:34:42.060.622 The error from device(chipId:5, dieId:0), serial number is "
        "11, there is an exception of aivec error, core id is 2, error code = 0x800000, dump info: pc start: "
        "0x12523dffb6fc\n",
        "not_oom_other",
        False,
    ),
    "canns_out_of_range_mte_address_is_a_crash": Case(
        "[rank0]:        The extend info: errcode:(0x800000, 0x4000, 0) errorStr: The DDR address of the MTE "
        "instruction is out of range.CCU instruction address check error.\n",
        "not_oom_other",
        False,
    ),
    "a_device_streams_notify_wait_timeout_is_the_network": Case(
        "(Worker_DP2_TP0_EP8 pid=1071) ERROR 07-21 06:27:44 [multiproc_executor.py:962]         The error from "
        "device(chipId:4, dieId:0), serial number is 1, notify wait timeout occurred during task execution, "
        "stream_id:142, sq_id:146, task_id:46645\n",
        "network_communication",
        False,
    ),
    "a_parameter_no_checkpoint_filled_is_weight_loading": Case(
        "--model /data/merged_model_GPTQ --max-model-len 8192 --quantization gptq_marlin\n"
        "fails with\n"
        "RuntimeError: Some weights are not initialized from checkpoints: {'model.layers.3.mlp.gate_up_proj."
        "g_idx_sort_indices', 'model.layers.8.self_attn.qkv_proj.g_idx_sort_indices'}\n",
        "weight_loading",
        False,
        "high",
    ),
    "a_settings_bound_is_the_environment": Case(
        "ValueError: Due to limitations of the custom LoRA CUDA kernel, max_num_batched_tokens must be <= 65528 when "
        "LoRA is enabled.\n",
        "environment",
        False,
        "low",
    ),
    "a_kernels_must_be_provided_assert_is_not_a_setting": Case(
        "ERROR 05-31 19:13:08 [engine.py:164] AssertionError('seqused_k must be provided if block_table is "
        "provided')\n",
        "not_oom_other",
        False,
    ),
    "a_checkpoint_tensor_without_a_parameter_retyped_is_weight_loading": Case(
        "vllm 0.28.1 report error:\n"
        "ValueError: There is no module or parameter named :fc.weight in qwen3_5MultiTokenPredictor.\n",
        "weight_loading",
        False,
        "high",
    ),
    "a_request_whose_grammar_rejected_its_tokens_failed_on_its_own": Case(
        '(APIServer pid=9419) INFO:     127.0.0.1:37932 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        "(EngineCore pid=10458) ERROR 08-09 09:58:19 [scheduler.py:1841] Unexpected: grammar rejected tokens [200028] "
        "for request chatcmpl-8da6fc665494abe1-b5b27872. Terminating request.\n"
        "(APIServer pid=9419) ERROR 08-09 09:58:19 [serving.py:175] Request chatcmpl-8da6fc665494abe1 failed with an "
        "internal error during generation\n"
        '(APIServer pid=9419) INFO:     127.0.0.1:37932 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n',
        "not_oom_other",
        False,
        "high",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session20_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
