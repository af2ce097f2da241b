"""Classes of session 15 (issue 13). LLM.generate's progress bar ("Processed prompts: N%|...| n/N") says how an
offline run ended when no failure is logged: at N/N the call finished (healthy); left at 0/N, with nothing after it,
no prompt ever finished (a hang: timeout, confidence low); part-way it says nothing. tqdm redraws the bar in place, so
the last redraw on a line counts. vLLM 0.6-0.7 word the shared-memory broadcast wait "No available block found in 60
second." (later "No available shared memory broadcast block ..."): the same hang. A lone out-of-memory line whose
PyTorch allocation is 98% of the device or more came from a step no gpu_memory_utilization budget bounds: weight
loading (low), not serving.

V1's engine core logs "EngineCore encountered a fatal error" only once the core was built (start-up done), so alone it
is a crash while serving; the dead-engine errors (EngineDeadError's "EngineCore encountered an issue") say so whatever
start-up marker the excerpt kept last. A Ray compiled graph's channel closing ("ChannelError: Channel closed") is the
network. Before serving, an exception no rule places is the environment when it is a feature not
implemented (NotImplementedError), a refusal worded "do not support", or a model config without a field the code
reads. Also the environment: ptxas refusing the PTX for the GPU (also as Triton's PTXASError), FlashInfer's JIT without
an architecture for the GPU, a trust_remote_code config class that cannot be pickled for a spawned process,
Transformers' AutoModel without a class for the config, Transformers' old rope_scaling check, and the host C compiler
failing on Triton's launcher. torch.compile: vLLM's "failed to compile the model", a compiled graph's shape guard, and
a custom op the tracer cannot dispatch. A traceback the API server's request handler logs (serving_chat.py) failed one
request, even when cut. The KV check's figures alone ("1.75 GiB KV cache is needed") and a plugin's "not enough Metal
memory for KV cache" are the KV allocation; a checkpoint tensor narrower than its shard (torch's narrow check) is
weight loading. The host's file system refusing a write (EACCES, EROFS) is the environment, and so is PyTorch's lazy
CUDA initialisation failing whatever its case. PyTorch before 2.1 words an OOM's figures in one parenthesis ("(GPU 0;
79.15 GiB total capacity; 76.02 GiB already allocated; ...)"): they are read as the newer wording's are."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

CORE = "(EngineCore_DP0 pid=60) ERROR 01-12 01:09:14 [core.py:708] "
READY = "INFO 06-16 09:49:10 [launcher.py:29] Route: /v1/chat/completions, Methods: POST\nINFO:     Application startup complete.\n"
INIT = "INFO 04-09 02:07:01 [core.py:162] init engine (profile, create kv cache, warmup model) took 68.69 seconds\n"
BAR = (
    "Processed prompts: {pct:>3}%|{fill:<10}| {done}/{total} [00:03<00:00,  4.40it/s, est. speed input: 770.79 toks/s]"
)


def bar(done: int, total: int) -> str:
    pct = 100 * done // total
    return BAR.format(pct=pct, fill="█" * (pct // 10), done=done, total=total)


def oom(allocated_gib: float, total_gib: float, cached_mib: float = 12.0) -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB. GPU 0 has a total capacity of "
        f"{total_gib} GiB of which 145.19 MiB is free. Including non-PyTorch memory, this process has {total_gib - 0.2:.2f} "
        f"GiB memory in use. Of the allocated memory {allocated_gib} GiB is allocated by PyTorch, and {cached_mib} MiB "
        "is reserved by PyTorch but unallocated.\n"
    )


CASES = {
    "offline_generate_finished": Case(bar(16, 16) + "\n", "healthy", False, "medium"),
    "offline_generate_redrawn_to_the_end_on_one_line": Case(
        bar(0, 4) + "\r" + bar(2, 4) + "\r" + bar(4, 4) + "\n", "healthy", False, "medium"
    ),
    "offline_generate_never_finished_a_prompt": Case(INIT + bar(0, 1) + "\n", "timeout", False, "low"),
    "offline_generate_part_way_says_nothing": Case(bar(2, 4) + "\n", "unknown", False),
    "offline_generate_part_way_after_start_up_is_start_up": Case(INIT + bar(2, 4) + "\n", "healthy", False),
    "shared_memory_wait_in_0_6_wording": Case(
        "WARNING 10-21 10:12:55 shm_broadcast.py:386] No available block found in 60 second. \n",
        "timeout",
        False,
        "medium",
    ),
    "oom_with_pytorch_holding_the_whole_device": Case(oom(78.78, 79.44), "weight_loading", True, "low"),
    # serving: a step's freed activations cached (2.2 GiB), the KV pool inside the device's budget
    "oom_with_pytorch_inside_a_budget_is_serving": Case(oom(74.06, 79.14, 2273.0), "serving_prefill", True, "low"),
    "engine_core_fatal_error_alone_is_serving": Case(
        "(EngineCore_DP0 pid=7) ERROR 05-13 16:11:49 [core.py:432] EngineCore encountered a fatal error.\n",
        "not_oom_other",
        False,
        "low",
    ),
    "not_implemented_before_serving": Case(
        "NotImplementedError: Encoder self-attention and encoder/decoder cross-attention are not implemented for "
        "TritonAttentionImpl\n",
        "environment",
        False,
        "low",
    ),
    "not_implemented_after_ready_is_a_crash": Case(
        READY + "NotImplementedError: Encoder self-attention is not implemented for TritonAttentionImpl\n",
        "not_oom_other",
        False,
    ),
    "do_not_support_a_setting": Case(
        "ValueError: TT-LLama8B and TT-Llama11B do not support max_model_len greater than 32768 on N150 "
        "(received 65536).\n",
        "environment",
        False,
        "low",
    ),
    "model_config_without_a_field": Case(
        f"{CORE}AttributeError: 'LlavaConfig' object has no attribute 'vision_config'\n", "environment", False, "low"
    ),
    "ptxas_refuses_the_gpu_target": Case(
        "[rank0]:E0701 14:28:21.083000 911603 torch/_inductor/runtime/triton_heuristics.py:539] [0/0] ptxas "
        "/tmp/tmpmwke15zw.ptx, line 6; error   : PTX .version 8.4 does not support .target sm_120a\n",
        "environment",
        False,
        "high",
    ),
    "triton_ptxas_error": Case(
        f"{CORE}triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error\n",
        "environment",
        False,
        "high",
    ),
    "flashinfer_jit_without_the_architecture": Case(
        f"{CORE}RuntimeError: No supported CUDA architectures found for major versions [10].\n", "environment", False
    ),
    "remote_code_config_cannot_be_pickled": Case(
        "_pickle.PicklingError: Can't pickle <class 'transformers_modules.deepseek-ai.DeepSeek-V2-Lite.604d5664."
        "configuration_deepseek.DeepseekV2Config'>: it's not the same object\n",
        "environment",
        False,
        "high",
    ),
    "automodel_without_a_class_for_the_config": Case(
        "ValueError: Unrecognized configuration class <class 'transformers.models.gemma3.configuration_gemma3."
        "Gemma3Config'> for this kind of AutoModel: AutoModel.\n",
        "environment",
        False,
        "high",
    ),
    "old_transformers_rope_scaling_check": Case(
        "ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got {'factor': 8.0, "
        "'rope_type': 'llama3'}\n",
        "environment",
        False,
        "high",
    ),
    "host_c_compiler_fails_on_tritons_launcher": Case(
        f"{CORE}torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/lib64/ccache/gcc', "
        "'/tmp/tmp23j1qrsv/main.c', '-O3', '-shared', '-fPIC', '-o', '/tmp/tmp23j1qrsv/cuda_utils.so']' returned "
        "non-zero exit status 1.\n",
        "environment",
        False,
        "high",
    ),
    "vllm_failed_to_compile_the_model": Case(
        "RuntimeError: vLLM failed to compile the model. The most likely reason for this is that a previous "
        "compilation failed, leading to a corrupted compilation artifact.\n",
        "cudagraph_capture",
        False,
        "low",
    ),
    "compiled_graph_shape_guard": Case(
        "AssertionError: expected size 8192==512, stride 64==64 at dim=0\n", "cudagraph_capture", False, "low"
    ),
    "custom_op_the_tracer_cannot_dispatch": Case(
        "TypeError: Multiple dispatch failed for 'torch._ops.vllm.min_latency_fused_qkv_a_proj.default'; all "
        "__torch_dispatch__ handlers returned NotImplemented\n",
        "cudagraph_capture",
        False,
        "low",
    ),
    "request_handler_traceback_cut": Case(
        "(APIServer pid=17) ERROR 08-14 16:17:00 [serving_chat.py:222] Error in preprocessing prompt inputs\n"
        "(APIServer pid=17) ERROR 08-14 16:17:00 [serving_chat.py:222] Traceback (most recent call last):\n"
        "(APIServer pid=17) ERROR 08-14 16:17:00 [serving_chat.py:222]     ) = await self._preprocess_chat(\n",
        "not_oom_other",
        False,
        "low",
    ),
    "kv_figures_alone": Case(
        "ValueError: 1.75 GiB KV cache is needed, available 0.13 GiB\n", "kv_cache_allocation", True, "high"
    ),
    "plugin_without_memory_for_the_kv_cache": Case(
        "ValueError: Paged attention: not enough Metal memory for KV cache.\n", "kv_cache_allocation", True, "high"
    ),
    "checkpoint_tensor_narrower_than_its_shard": Case(
        "RuntimeError: start (0) + length (1280) exceeds dimension size (1024).\n", "weight_loading", False, "high"
    ),
    "dead_engine_after_start_up_markers_is_serving": Case(
        "INFO 10-20 03:11:02 [__init__.py:216] Automatically detected platform cuda.\n"
        "(APIServer pid=1) ERROR 10-20 03:20:50 [async_llm.py:485] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n",
        "not_oom_other",
        False,
        "low",
    ),
    "ray_compiled_graph_channel_closed": Case(
        "(EngineCore_DP0 pid=322563) (raylet, ip=172.27.221.101) experimental_mutable_object_provider.cc:153: "
        "Status not OK: ChannelError: Channel closed.\n",
        "network_communication",
        False,
        "high",
    ),
    "permission_denied_on_a_cache_directory": Case(
        "(EngineCore pid=84) torch._inductor.exc.InductorError: PermissionError: [Errno 13] Permission denied: "
        "'/.triton'\n",
        "environment",
        False,
        "high",
    ),
    "read_only_file_system": Case(
        "OSError: [Errno 30] Read-only file system: '/root/.cache/vllm'\n", "environment", False, "high"
    ),
    "lazy_cuda_init_in_lower_case": Case(
        "cuda call failed lazily at initialization with error: device >=0 && device < num_gpus INTERNAL ASSERT "
        'FAILED at "../aten/src/ATen/cuda/CUDAContext.cpp":50\n',
        "environment",
        False,
        "high",
    ),
    "old_pytorch_oom_figures_place_a_serving_engine": Case(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.15 GiB (GPU 0; 79.15 GiB total "
        "capacity; 76.02 GiB already allocated; 1.13 GiB free; 76.90 GiB reserved in total by PyTorch)\n",
        "serving_prefill",
        True,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session15_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
