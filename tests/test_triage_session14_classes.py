"""Classes of session 14 (issue 13). An exception that no frame, marker or mined template places, worded as a
refusal of a setting, a device count or a platform feature ("is not supported", "only supports", "is not
applicable in headless mode", "Insufficient devices", "N is not divisible by M", "Please try ..."), raised before
the engine served, is the launch being refused: the environment (settings and installation), confidence low. After
the server was ready the same wording is a crash while serving, and an exception worded otherwise stays a crash.
An error the OpenAI server's request handlers log (`serving_chat.py`, `serving.py`: a prompt over max_model_len, a
Harmony parse, the stream generator's exception) failed that request while the engine served on: with no engine
failure in the log it is `not_oom_other` (low), not healthy and not unknown; the tool parser's error on model text it
cannot parse is not (it appears in healthy runs). The environment also: DeepGEMM's host assertion ("Assertion error
(.../deepgemm-src/...): Unknown recipe"), Ray's object store asking for more /dev/shm than the container has,
Transformers unable to load a model's configuration or tokenizer, an option naming a tool-call or reasoning parser
the release does not have, and the nvcc command a failed JIT build echoes as the error. One request failing on its own content is `not_oom_other` too: the structured-output
grammar refusing a sampled token ("Failed to advance FSM for request"), a multimodal item larger than the encoder
cache sized at start-up. A traceback cut in the request path (the OpenAI server's request handlers, uvicorn handling
an HTTP request, the engine core taking a request in) is a crash while serving, as the model-execution path is. The network also
counts HCCL's failures (Ascend: torch_npu's ERR02200, "HCCL Error Code: N") and CuPy's NCCL errors; the environment
counts libNVVM refusing a JIT compiler's options and pydantic's refusal of a field of vLLM's config dataclasses
quoted without its header. max_num_seqs above the Mamba state blocks the pool holds is the KV cache's allocation, a
setting to lower, not out of memory. Also the environment: vLLM's CUTLASS scaled-mm built without a kernel for the GPU,
rocBLAS without a Tensile library for the card, LLVM's AMDGPU backend refusing a Triton kernel's stack, Transformers
5's per-layer config refusing a global read, and a kernel library with no kernel for the shape ("has no decode kernel
for this shape", before serving), a config that cannot be pickled for the process vLLM spawns (a patching library's
local class), and PyTorch refusing expandable segments with the memory pool vLLM's sleep mode allocates from. ROCm's runtime aborting a queue on a kernel's memory fault (HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION)
is a crash, not memory. A wrapper calling a vLLM built with another signature ("got an unexpected keyword argument",
before serving) is the environment; NCCL probing for an optional network plugin at INFO level is not a failure. vLLM's
sleep-mode allocator failing to map memory ("CUDA Error: out of memory at .../cumem_allocator.cpp") is out of memory
(a lone OOM line: the likeliest phase, confidence low); the model registry's inspection subprocess failing is the
environment."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames

CORE = "(EngineCore_DP0 pid=289) ERROR 09-27 14:03:50 [core.py:712] "
READY = (
    "INFO 06-16 09:49:10 [launcher.py:29] Route: /v1/chat/completions, Methods: POST\n"
    "INFO:     Application startup complete.\n"
)

CASES = {
    "headless_mode_refuses_a_setting": Case(
        "ValueError: data_parallel_rank is not applicable in headless mode\n", "environment", False, "low"
    ),
    "platform_finds_too_few_devices": Case(
        f"{CORE}ValueError: Insufficient devices for 2D mesh: found 1, expected 8 for mesh shape (1, 8).\n",
        "environment",
        False,
        "low",
    ),
    "loader_refuses_tensor_parallelism": Case(
        "ValueError: Prequant BitsAndBytes models with tensor parallelism is not supported. "
        "Please try with pipeline parallelism.\n",
        "environment",
        False,
        "low",
    ),
    "block_sizes_that_do_not_divide": Case(
        "ValueError: None of the kernel sizes [128] can divide physical block size 16 evenly\n",
        "environment",
        False,
        "low",
    ),
    "a_refusal_while_serving_is_a_crash": Case(
        READY + f"{CORE}NotImplementedError('The CPU backend currently does not support MoE.')\n",
        "not_oom_other",
        False,
    ),
    "an_exception_not_worded_as_a_refusal_stays_a_crash": Case(
        "TypeError: 'NoneType' object is not callable\n", "not_oom_other", False, "low"
    ),
    "request_over_max_model_len_in_the_api_server": Case(
        "ERROR 05-08 21:27:27 [serving_chat.py:198] ValueError: This model's maximum context length is 8192 tokens. "
        "However, you requested 8203 tokens (7691 in the messages, 512 in the completion).\n",
        "not_oom_other",
        False,
        "low",
    ),
    "harmony_parse_error_after_ready": Case(
        READY
        + "(APIServer pid=1) ERROR 08-06 23:25:57 [serving.py:830] openai_harmony.HarmonyError: unexpected tokens "
        'remaining in message header: Some("to=functions.web-browsing")\n',
        "not_oom_other",
        False,
        "low",
    ),
    "tool_parser_error_in_a_healthy_run": Case(
        READY + "ERROR 12-02 16:22:06 [hermes_tool_parser.py:117] Error in extracting tool call from response.\n",
        "healthy",
        False,
    ),
    "deepgemm_host_assertion": Case(
        "RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/../jit_kernels/impls/../heuristics/"
        "../../utils/layout.hpp:76): Unknown recipe\n",
        "environment",
        False,
        "high",
    ),
    "ray_object_store_larger_than_dev_shm": Case(
        "[2026-03-25 05:44:29,435 W 39 39] (raylet) store_runner.cc:83: System memory request exceeds memory "
        "available in /dev/shm. The request is for 10200547328 bytes, and the amount available is 9663676416 bytes.\n",
        "environment",
        False,
        "high",
    ),
    "transformers_cannot_load_the_config": Case(
        "OSError: Can't load the configuration of 'Qwen/Qwen1.5-72B-Chat-AWQ'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name.\n",
        "environment",
        False,
        "high",
    ),
    "unknown_tool_call_parser": Case(
        "KeyError: 'invalid tool call parser: kimi_k2 (chose from { deepseek_v3,hermes,mistral,pythonic })'\n",
        "environment",
        False,
        "high",
    ),
    "nvcc_command_of_a_failed_jit_build": Case(
        f"{CORE}:/usr/local/cuda-12.8/bin/nvcc --generate-dependencies-with-compile --dependency-output "
        "/root/.cache/flashinfer/0.6.4/89/cached_ops/batch_prefill/batch_prefill.cuda.o.d -c batch_prefill.cu\n",
        "environment",
        False,
        "high",
    ),
    "grammar_refuses_a_sampled_token": Case(
        f"{CORE.replace('core.py:712', 'backend_xgrammar.py:165')}Failed to advance FSM for request "
        "cmpl-4eb6fd83-0 for tokens 330. Please file an issue.\n",
        "not_oom_other",
        False,
        "high",
    ),
    "image_larger_than_the_encoder_cache": Case(
        # as an API client shows it: the message alone, without the exception's name
        "The decoder prompt contains a(n) image item with length 4641, which exceeds the pre-allocated "
        "encoder cache size 3721. Please reduce the input size or increase the encoder cache size by setting "
        "--limit-mm-per-prompt at startup.\n",
        "not_oom_other",
        False,
        "high",
    ),
    "cut_in_the_api_servers_request_handler": Case(
        frames(
            "",
            (
                "uvicorn/protocols/http/httptools_impl.py",
                "run_asgi",
                "result = await app(  # type: ignore[func-returns-value]",
            ),
            (
                "vllm/entrypoints/openai/serving_chat.py",
                "create_chat_completion",
                "request_prompts, engine_prompts = await self._preprocess_chat(",
            ),
            (
                "vllm/entrypoints/openai/serving_engine.py",
                "_tokenize_prompt_inputs",
                "yield self._normalize_prompt_text_to_input(",
            ),
        )
        + "[...]\n",
        "not_oom_other",
        False,
        "low",
    ),
    "cut_in_the_engine_core_adding_a_request": Case(
        frames(
            CORE,
            ("vllm/v1/engine/core.py", "process_input_sockets", "request = self.preprocess_add_request(request)"),
            ("vllm/v1/engine/core.py", "preprocess_add_request", "self.mm_receiver_cache.get_and_update_features("),
        )
        + "[...]\n",
        "not_oom_other",
        False,
        "low",
    ),
    "hccl_api_failed": Case(
        f"{CORE}[ERROR] 2025-10-10-17:15:01 (PID:1195, Device:0, RankID:-1) ERR02200 DIST call hccl api failed.\n",
        "network_communication",
        False,
        "high",
    ),
    "hccl_error_code": Case(
        "RuntimeError: Failed to register memory | HCCL Error Code: 19\n", "network_communication", False, "high"
    ),
    "cupy_nccl_error": Case(
        "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_INVALID_USAGE: invalid usage\n",
        "network_communication",
        False,
        "high",
    ),
    "libnvvm_refuses_the_options": Case(
        "error: unknown: failed to verify the compilation unit (error 7: NVVM_ERROR_INVALID_OPTION),\n"
        "libNVVM extra log: libnvvm : error: -arch=compute_ is an unsupported option\n",
        "environment",
        False,
        "high",
    ),
    "config_field_refused_without_its_header": Case(
        "Value error, Eagle3 is only supported for Llama models. Got self.target_model_config.hf_text_config."
        "model_type='qwen3' [type=value_error, input_value=ArgsKwargs((), {'method': 'eagle3'}), "
        "input_type=ArgsKwargs]\n",
        "environment",
        False,
        "high",
    ),
    "max_num_seqs_above_the_mamba_blocks": Case(
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (969). Each decode sequence requires "
        "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 969 or "
        "increase gpu_memory_utilization.\n",
        "kv_cache_allocation",
        False,
        "high",
    ),
    "no_compiled_cutlass_scaled_mm": Case(
        "NotImplementedError: No compiled cutlass_scaled_mm for a compute capability less than CUDA device "
        "capability: 75\n",
        "environment",
        False,
        "high",
    ),
    "rocblas_without_a_tensile_library": Case(
        "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch : "
        "gfx1150\n",
        "environment",
        False,
        "high",
    ),
    "triton_kernel_stack_too_large_on_rocm": Case(
        "error: triton_flash_attention.py:211:0: stack frame size (164332) exceeds limit (131056) in function "
        "'attn_fwd_0d1d2d3de45de6d7de8de9de10c11de12'\n",
        "environment",
        False,
        "high",
    ),
    "transformers_per_layer_config": Case(
        "transformers.integrations.heterogeneity.configuration_utils.AmbiguousGlobalPerLayerAttributeError:\n"
        "'head_dim' is a per-layer attribute and may vary across layers.\n",
        "environment",
        False,
        "high",
    ),
    "kernel_library_without_a_kernel_for_the_shape": Case(
        "ValueError: SM120 sparse-MLA has no decode kernel for this shape: num_tokens=16, num_heads=64, topk=11\n",
        "environment",
        False,
        "low",
    ),
    "config_that_cannot_be_pickled_for_the_engine_process": Case(
        "RuntimeError: Can't pickle local object 'patch_vllm_compute_dtype.<locals>.BitsAndBytesConfig'\n",
        "environment",
        False,
        "high",
    ),
    "expandable_segments_with_sleep_mode": Case(
        "AssertionError: Expandable segments are not compatible with memory pool.\n"
        "Please track https://github.com/pytorch/pytorch/issues/147851 for the\nlatest updates.\n",
        "environment",
        False,
        "high",
    ),
    "rocm_queue_aborted_on_a_memory_fault": Case(
        READY + ":0:rocdevice.cpp            :3675: 2139490044663 us:  Callback: Queue 0x7ee7b4200000 aborting with "
        "error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest "
        "legal address. code: 0x29\n",
        "not_oom_other",
        False,
    ),
    "wrapper_built_for_another_vllm_signature": Case(
        "    self.model = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**engine_args))\n"
        "TypeError: __init__() got an unexpected keyword argument 'limit_mm_per_prompt'\n",
        "environment",
        False,
        "medium",  # session 18: named by E-SIGNATURE (a call that does not fit the installed signature), not by wording
    ),
    "nccl_probing_for_its_network_plugin_is_not_a_failure": Case(
        "wTR24:410601:410601 [1] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
        "object file: No such file or directory : when loading libnccl-net.so\n"
        "wTR24:410601:410601 [1] NCCL INFO NET/Plugin: Using internal network plugin.\n" + READY,
        "healthy",
        False,
    ),
    # session 16 places the sleep-mode allocator's OOM in the KV allocation (test_triage_session16_classes.py)
    "sleep_mode_allocator_out_of_memory": Case(
        "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n",
        "kv_cache_allocation",
        True,
        "low",
    ),
    "model_registry_inspection_subprocess_failed": Case(
        "ERROR 01-14 23:14:12 registry.py:297] subprocess.CalledProcessError: Command '['/usr/bin/python3', '-m', "
        "'vllm.model_executor.models.registry']' returned non-zero exit status 1.\n",
        "environment",
        False,
        "high",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session14_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
