"""Classes of session 12 (issue 13). PyTorch's caching allocator, when cudaMalloc fails where NVML cannot be queried
(MIG slices, containers), trips "NVML_SUCCESS == r INTERNAL ASSERT FAILED" on its out-of-memory path
(reportProcessMemoryInfo; pytorch/pytorch#112377, #185240) instead of raising the OOM: that assert is memory, its
init-time sibling (`nvmlInit_v2_()`) is not. The model registry's refusal ("Model architectures [...] are not
supported for now", and "is not a registered model in the Transformers library") is the environment also without its
"ValueError: ", as is any setting vLLM refuses at start-up (argparse's "error: argument", the config's validation):
the corpus files those under environment. PyTorch's "NCCL Error 3: internal error" is NCCL's. vllm-ascend's KV
budget line ("Available memory: 0, total memory: N") is the KV-sizing marker. Pydantic refusing one of vLLM's config
classes is such a setting; refusing a request's or a response's model is not. V0's background-loop callback
("Exception in callback functools.partial(<function _raise_exception_on_finish") is a crash. A traceback in vLLM's
structured output (a request's grammar) is serving. A segfault whose faulting function is NCCL's, and a Ray worker
that cannot register with its raylet, are the network. A message quoted only up to the end of one of its sentences
is found by the template it begins. A device OOM with CUDA graphs already captured and no ready line is V1's sampler
warm-up also when a traceback beside it (the engine's) is in compile_or_warm_up_model, or the engine says its
start-up failed; with nothing of the kind it stays a serving OOM."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames

from oomkit.triage.knowledge import match_messages

OOM_GRAPHS = (
    "(VllmWorker rank=0 pid=2961) ERROR 03-19 07:27:53 [multiproc_executor.py:375] torch.OutOfMemoryError: CUDA out "
    "of memory. Tried to allocate 1.74 GiB. GPU 0 has a total capacity of 23.57 GiB of which 594.88 MiB is free. "
    "Process 133267 has 22.97 GiB memory in use. Of the allocated memory 20.21 GiB is allocated by PyTorch, with "
    "128.00 MiB allocated in private pools (e.g., CUDA Graphs), and 1.07 GiB is reserved by PyTorch but unallocated.\n"
)
ENGINE = "ERROR 03-19 07:27:53 [core.py:340] "
CASES = {
    "nvml_assert_on_the_oom_path": Case(
        'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1154, '
        "please report a bug to PyTorch.\n",
        "serving_prefill",
        True,
        "low",
    ),
    "nvml_init_assert_is_not_memory": Case(
        "RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at "
        '"../c10/cuda/CUDACachingAllocator.cpp":813, please report a bug to PyTorch.\n',
        "not_oom_other",
        False,
    ),
    # (session 14: the Mamba-blocks message this case first quoted has a hand rule now, E-MAMBABLOCKS)
    "first_sentence_of_a_template": Case(
        "ValueError: Out of memory while warming up the pooler (task=embed) with 256 dummy requests.\n",
        "memory_profiling",
        True,
        "high",
    ),
    "graphs_captured_engine_in_warm_up": Case(
        OOM_GRAPHS
        + frames(
            ENGINE,
            ("vllm/v1/engine/core.py", "_initialize_kv_caches", "self.model_executor.initialize_from_config(kv)"),
            (
                "vllm/v1/executor/abstract.py",
                "initialize_from_config",
                'self.collective_rpc("compile_or_warm_up_model")',
            ),
            ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "raise e"),
        )
        + "[...]\n",
        "memory_profiling",
        True,
        "low",
    ),
    "graphs_captured_start_up_failed": Case(
        OOM_GRAPHS + "(EngineCore_DP0 pid=2900) ERROR 03-19 07:27:54 [core.py:340] EngineCore failed to start.\n",
        "memory_profiling",
        True,
        "low",
    ),
    # the model registry's refusal quoted without its exception class
    "unprefixed_architecture_refusal": Case(
        "Model architectures ['GlmForCausalLM'] are not supported for now.\n", "environment", False, "high"
    ),
    "transformers_registry_refusal": Case(
        "ValueError: Cannot find model module. 'MiniMaxM1ForCausalLM' is not a registered model in the Transformers "
        "library (only relevant if the model is meant to be in Transformers) and 'AutoModel' is not present in the "
        "model config's 'auto_map' (relevant if the model is meant to be in Transformers).\n",
        "environment",
        False,
        "high",
    ),
    "cli_argument_refused": Case(
        "vllm serve: error: argument --tool-call-parser: invalid choice: 'glm45' (choose from 'deepseek_v3', "
        "'glm4_moe', 'hermes')\n",
        "environment",
        False,
        "high",
    ),
    "nccl_error_numbered": Case(
        "(RayWorkerWrapper pid=23558, ip=10.0.128.18) ERROR 07-28 13:53:40 worker_base.py:382] RuntimeError: NCCL "
        "Error 3: internal error - please report this issue to the NCCL developers\n",
        "network_communication",
        False,
        "high",
    ),
    "ascend_kv_budget_then_failed_start": Case(
        "(Worker_TP0 pid=552) INFO 10-28 21:14:49 [worker_v1.py:259] Available memory: 0, total memory: 65452113920\n"
        "(EngineCore_DP0 pid=415) ERROR 10-28 21:14:49 [core.py:708] EngineCore failed to start.\n",
        "kv_cache_allocation",
        False,
        "low",
    ),
    "auto_weights_loader_unknown_parameter": Case(
        "ValueError: There is no module or parameter named 'embed_tokens' in LlamaForCausalLM\n",
        "weight_loading",
        False,
        "high",
    ),
    "segfault_in_nccl": Case(
        "(RayWorkerWrapper pid=5993) *** SIGSEGV received at time=1722289279 on cpu 61 ***\n"
        "(RayWorkerWrapper pid=5993) PC: @     0x7f0c73d2944a  (unknown)  addProxyOpIfNeeded()\n",
        "network_communication",
        False,
        "high",
    ),
    "segfault_elsewhere_is_a_crash": Case(
        "(RayWorkerWrapper pid=5993) *** SIGSEGV received at time=1722289279 on cpu 61 ***\n"
        "(RayWorkerWrapper pid=5993) PC: @     0x7f0c73d2944a  (unknown)  at::native::index_select()\n",
        "not_oom_other",
        False,
    ),
    "ray_worker_cannot_join_raylet": Case(
        "[2024-06-13 16:11:51,588 E 13261 13261] core_worker.cc:228: Failed to register worker "
        "01000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. IOError: [RayletClient] Unable to "
        "register worker with raylet. No such file or directory\n",
        "network_communication",
        False,
        "high",
    ),
    "config_class_validation": Case(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n",
        "environment",
        False,
        "high",
    ),
    # pydantic refusing a response object is the API layer while serving, not a setting
    "response_validation_is_a_crash": Case(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for CompletionResponseChoice\n",
        "not_oom_other",
        False,
    ),
    "v0_background_loop_callback": Case(
        "INFO 01-18 06:58:46 async_llm_engine.py:384] Received request cmpl-dfb5d2e7322a4697b8a0184901953e56: "
        "prompt: 'MATCH DETAILS'.\n"
        "INFO 01-18 06:58:47 async_llm_engine.py:134] Aborted request cmpl-6bd865032aef41c6b135d86278e38264.\n"
        "Exception in callback functools.partial(<function _raise_exception_on_finish at 0x7f2546afeef0>, "
        "request_tracker=<vllm.engine.async_llm_engine.RequestTracker object at 0x7f254408e9b0>)\n",
        "not_oom_other",
        False,
    ),
    # a request's grammar is compiled while serving: a cut traceback there is a serving crash
    "structured_output_cut": Case(
        frames(
            "ERROR 04-21 00:33:55 [core.py:387] ",
            ("vllm/v1/structured_output/request.py", "_check_grammar_completion", "self._grammar.result(timeout=1e-4)"),
            ("vllm/v1/structured_output/backend_xgrammar.py", "compile_grammar", "ctx = self.compiler.compile(s)"),
        )
        + "[...]\n",
        "not_oom_other",
        False,
        "low",
    ),
    # nothing says start-up: with graphs held, a serving OOM
    "graphs_captured_alone_is_serving": Case(OOM_GRAPHS, "serving_prefill", True, "low"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session12_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (108).", True),
        # not at a sentence's end: the message goes on, and the whole template must match
        ("ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (108). Something else.", False),
        ("ValueError: max_num_seqs (256) exceeds available Mamba cache blocks", False),
    ],
)
def test_a_message_cut_at_a_sentence_end_matches_its_template(text: str, found: bool) -> None:
    rows = match_messages(text)
    assert bool(rows) == found
    if found:
        assert rows[0].source.startswith("vllm/config/compilation.py:")
