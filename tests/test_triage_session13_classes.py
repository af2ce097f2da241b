"""Classes of session 13 (issue 13). vLLM builds a model's modules only while it loads the model (the loader's
`initialize_model` calls the model class; its `__init__` builds the layers, through `make_layers`' lambda; layers
allocate their parameters in `create_weights`), so a traceback in those constructors is weight loading, also when
the excerpt stops before the exception line; a quantization config's constructor is not (it also runs while the
engine's settings are built), and a model's `forward` is not (profiling, graph capture and serving all run it). A crash wrapper whose own process's frames place
nothing ("WorkerProc hit an exception" quoted without its process prefix, the API server's "Engine core
initialization failed. See root cause above" under its own launch frames) reports the other process's failure: the
step its traceback is in, when the other processes' tracebacks name exactly one. An exception line that nothing placed,
followed by a traceback of its process (a chained exception's outer traceback), is placed by that traceback's
frames. vLLM's quantization capability check ("is not supported for the current GPU") and CUDA's
cudaErrorNoKernelImageForDevice are the environment. Kernel faults on other accelerators (ROCm's "Memory access fault
by GPU node-N", Habana's Synapse device-critical error, Ascend's "aicore execution is abnormal") are crashes, not
memory. A TCPStore client losing its server is the network, as are the KV connectors' failed pulls and handshakes
(NIXL, Mooncake); a bug in a connector's own code is not the network (its code runs in every step). A KV budget of zero
or less ("Available KV cache memory: -0.87 GiB", V0's "# GPU blocks: 0") is the KV cache's allocation failing, the
error after it cut. CPython's faulthandler dump (innermost frame first, "line N in func") places a crash like a
traceback. The compilers Dynamo hands a graph to (vLLM's compile backend, Inductor's compile_fx, AOT compilation)
are torch.compile, graph capture's step; a log cut in a traceback whose first frame lost its process prefix is placed
by the rest of that traceback. vLLM's stand-in for a missing deep_gemm is the environment, as is the Transformers backend refusing a model ("The
Transformers implementation of X is not compatible with vLLM") and a ptxas that predates the GPU ("Value 'sm_121a' is
not defined for option 'gpu-name'"), as are compressed-tensors' scheme check (also as the tuple some releases built its
message as) and vLLM's Ray set-up finding no GPU on its node ("Current node has no GPU available"). AutoWeightsLoader's
recursion over the checkpoint (`_load_module`, `_groupby_prefix`) is weight loading. A source checkout named vllm
(".../vllm/vllm/v1/...") is looked up in vLLM's frame table as the installed package's module. An exception's repr ("NotImplementedError('...')",
which V0's multiprocessing engine logs) is an exception line; beside a request vLLM refused for its length the engine
was serving, so the template's start-up step does not place it. A kernel crash inside a start-up step's frames is that step failing, and after the ready line a crash."""

from pathlib import Path

import pytest
from _triage_synth import SITE, Case, checked_verdict, frames

from oomkit.logs.line import parse_line
from oomkit.triage.knowledge import frame_phase

WORKER = "(VllmWorker rank=4 pid=555) ERROR 05-04 12:38:38 [multiproc_executor.py:380] "
CORE = "(EngineCore pid=934) ERROR 07-20 02:58:31 [core.py:1330] "
API = "(APIServer pid=1) "
MOE = "vllm/model_executor/models/qwen3_moe.py"
CONSTRUCTION = (
    (MOE, "<lambda>", "lambda prefix: Qwen3MoeDecoderLayer(config=config,"),
    (MOE, "__init__", "self.mlp = Qwen3MoeSparseMoeBlock(config=config,"),
    (MOE, "__init__", "self.experts = FusedMoE(num_experts=self.n_routed_experts,"),
    (
        "vllm/model_executor/layers/fused_moe/layer.py",
        "__init__",
        "self.quant_method.create_weights(layer=self, **moe_quant_params)",
    ),
)
LAUNCH = frames(
    API,
    ("vllm/v1/engine/utils.py", "launch_core_engines", "wait_for_engine_startup("),
    ("vllm/v1/engine/utils.py", "wait_for_engine_startup", 'raise RuntimeError("Engine core initialization failed. "'),
) + (
    f"{API}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore': 1}\n"
)


def cut(text: str) -> str:
    """The excerpt stops inside the traceback: its last frame, no exception line."""
    return text + "[...]\n"


READY = "INFO 06-16 09:49:10 [launcher.py:29] Route: /v1/chat/completions, Methods: POST\nINFO:     Application startup complete.\n"
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py"


def worker_cut_in(step: str, call: str) -> str:
    """A worker's traceback through its busy loop into the worker's `step`, cut at its call into the runner."""
    return cut(
        frames(
            WORKER,
            ("vllm/v1/executor/multiproc_executor.py", "worker_busy_loop", "output = func(*args, **kwargs)"),
            ("vllm/v1/worker/gpu_worker.py", step, f"self.model_runner.{call}()"),
        )
    )


CASES = {
    "cut_in_model_construction": Case(cut(frames(WORKER, *CONSTRUCTION)), "weight_loading", False, "low"),
    "cut_in_a_layer_allocating_its_weights": Case(
        cut(frames(WORKER, *CONSTRUCTION[2:])), "weight_loading", False, "low"
    ),
    "cut_in_a_quantization_config_constructor": Case(
        cut(
            frames(
                WORKER,
                (
                    "vllm/model_executor/layers/quantization/awq.py",
                    "from_config",
                    "return cls(weight_bits, group_size)",
                ),
                ("vllm/model_executor/layers/quantization/awq.py", "__init__", "raise ValueError("),
            )
        ),
        "unknown",
        False,
    ),
    "cut_in_a_models_forward_is_not_construction": Case(
        cut(
            frames(
                WORKER,
                (
                    MOE,
                    "forward",
                    "hidden_states = self.experts(hidden_states=hidden_states, router_logits=router_logits)",
                ),
                (
                    "vllm/model_executor/layers/fused_moe/layer.py",
                    "forward",
                    "return self.forward_impl(hidden_states, router_logits)",
                ),
            )
        ),
        "unknown",
        False,
    ),
    "wrapper_without_its_prefix_and_a_profiling_traceback": Case(
        "WorkerProc hit an exception: %s\n" + worker_cut_in("determine_available_memory", "profile_run"),
        "memory_profiling",
        False,
        "low",
    ),
    "api_server_wrapper_and_the_engines_cut_traceback": Case(
        cut(
            frames(
                CORE,
                ("vllm/v1/engine/core.py", "__init__", "self.model_executor = executor_class(vllm_config)"),
                ("vllm/model_executor/model_loader/default_loader.py", "load_weights", "loaded = model.load_weights("),
            )
        ).replace("[...]\n", "")
        + LAUNCH,
        "weight_loading",
        False,
        "low",
    ),
    "exception_then_its_chained_traceback": Case(
        f"{WORKER}AttributeError: 'GDNAttentionMetadataBuilder' object has no attribute 'aclgraph_support'\n"
        + worker_cut_in("compile_or_warm_up_model", "capture_model"),
        "cudagraph_capture",
        False,
        "medium",
    ),
    "quantization_capability_check": Case(
        "The quantization method awq is not supported for the current GPU. Minimum capability: 75. "
        "Current capability: 70.\n",
        "environment",
        False,
        "high",
    ),
    "no_kernel_image_as_cuda_names_it": Case(
        f"{CORE}Search for `cudaErrorNoKernelImageForDevice' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n",
        "environment",
        False,
    ),
    "rocm_memory_access_fault": Case(
        "Memory access fault by GPU node-6 (Agent handle: 0x501def90) on address 0x7f5e50c00000. Reason: Unknown.\n",
        "not_oom_other",
        False,
    ),
    "habana_device_critical_error": Case(
        "Synapse detected a device critical error that requires a restart. Killing process in 5 seconds (hl: 6) "
        "10:29:11 [No progress error]\n",
        "not_oom_other",
        False,
    ),
    "ascend_aicore_fault": Case(
        "[ERROR] 2026-08-14-11:02:23 (PID:1588, Device:3, RankID:-1) ERR00100 PTA call acl api failed\n"
        "[Error]: The aicore execution is abnormal.\n",
        "not_oom_other",
        False,
    ),
    "tcpstore_client_lost_its_server": Case(
        "[rank30]:[W111 00:54:10.905768298 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=99, "
        "addr=[::ffff:10.0.0.2]:38760, remote=[::ffff:10.0.0.1]:42643): Failed to recv, got 0 bytes. Connection was "
        "likely closed. Did the remote server shutdown or crash?\n",
        "network_communication",
        False,
    ),
    "nixl_transfer_failure_while_serving": Case(
        READY + "(Worker_TP0 pid=2823482) ERROR 10-16 17:22:56 [nixl_connector.py:1815] NIXL transfer failure: "
        "NIXL_ERR_REMOTE_DISCONNECT | Context: {'remote_engine_id': 'e1'}\n",
        "network_communication",
        False,
        "high",
    ),
    "mooncake_transfer_failed_while_serving": Case(
        READY + "(Worker_DP0_TP1_EP1 pid=782969) ERROR 03-31 02:49:30 [mooncake_connector.py:547] Mooncake transfer "
        "failed for request chatcmpl-ba310df4\n",
        "network_communication",
        False,
        "high",
    ),
    "a_bug_in_a_kv_connectors_code": Case(
        frames(
            "(EngineCore_DP0 pid=923955) ",
            (CONNECTOR, "wait_for_save", "self._lmcache_engine.wait_for_save()"),
        )
        + "(EngineCore_DP0 pid=923955) AssertionError\n",
        "not_oom_other",
        False,
    ),
    "negative_kv_budget": Case(
        "INFO 03-01 10:00:00 [default_loader.py:262] Loading weights took 12.10 seconds\n"
        "INFO 03-01 10:00:01 [gpu_model_runner.py:2653] Model loading took 27.5376 GiB and 12.7 seconds\n"
        "INFO 03-01 10:00:09 [gpu_worker.py:298] Available KV cache memory: -0.87 GiB\n",
        "kv_cache_allocation",
        True,
        "medium",
    ),
    "v0_no_gpu_blocks": Case(
        "INFO 05-01 10:00:00 model_runner.py:1067] Loading model weights took 13.4 GB\n"
        "INFO 05-01 10:00:05 gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 2048\n",
        "kv_cache_allocation",
        True,
        "medium",
    ),
    "faulthandler_dump_in_profiling": Case(
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f2a1b7fe640 (most recent call first):\n"
        + "".join(
            f'  File "{SITE}/{path}", line {100 + i} in {func}\n'
            for i, (path, func) in enumerate(
                (
                    ("vllm/model_executor/layers/fused_moe/fused_moe.py", "invoke_fused_moe_kernel"),
                    ("vllm/worker/model_runner.py", "profile_run"),
                    ("vllm/worker/worker.py", "determine_num_available_blocks"),
                    ("vllm/worker/worker_base.py", "execute_method"),
                    ("vllm/engine/llm_engine.py", "_initialize_kv_caches"),
                )
            )
        ),
        "memory_profiling",
        False,
    ),
    "illegal_access_in_profiling": Case(
        worker_cut_in("determine_available_memory", "profile_run").replace("[...]\n", "")
        + f"{WORKER}RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "memory_profiling",
        False,
        "medium",
    ),
    "illegal_access_while_serving_stays_a_crash": Case(
        READY
        + frames(
            "(EngineCore_DP0 pid=7) ",
            ("vllm/v1/engine/core.py", "step", "model_output = self.execute_model_with_error_logging("),
        )
        + "(EngineCore_DP0 pid=7) RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "not_oom_other",
        False,
        "high",
    ),
    "cut_in_vllms_compile_backend_first_frame_without_prefix": Case(
        cut(
            f'  File "{SITE}/torch/_dynamo/aot_compile.py", line 259, in aot_compile_fullgraph\n'
            + frames(
                "(EngineCore_DP0 pid=2119) ",
                ("vllm/compilation/backends.py", "__call__", "PiecewiseCompileInterpreter("),
                ("vllm/compilation/backends.py", "call_module", "self.vllm_backend.compiler_manager.compile("),
            ).split("\n", 1)[1]
        ),
        "cudagraph_capture",
        False,
        "low",
    ),
    "deep_gemm_missing": Case(
        f"{WORKER}RuntimeError: DeepGEMM backend is not available or outdated. Please install or update the "
        "`deep_gemm` to a newer version to enable FP8 kernels.\n",
        "environment",
        False,
        "high",
    ),
    "exception_repr_while_serving": Case(
        READY + "ERROR 11-11 11:42:38 engine.py:158] NotImplementedError('The CPU backend currently does not support "
        "MoE.')\n",
        "not_oom_other",
        False,
        "medium",
    ),
    "template_does_not_place_an_error_beside_a_refused_request": Case(
        "WARNING 01-16 14:15:07 scheduler.py:944] Input prompt (19 tokens) is too long and exceeds limit of 5\n"
        "ERROR 01-16 14:15:07 engine.py:137] ValueError('Sampling parameters are missing for a CompletionRequest.')\n",
        "not_oom_other",
        False,
        "medium",
    ),
    "transformers_backend_refuses_the_model": Case(
        "ERROR 02-23 13:07:13 engine.py:400] The Transformers implementation of XLMRobertaModel is not compatible "
        "with vLLM.\n",
        "environment",
        False,
        "high",
    ),
    "ptxas_older_than_the_gpu": Case(
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'\n", "environment", False, "high"
    ),
    "quantization_scheme_check_as_a_tuple": Case(
        "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min capability: 80. ', "
        "'Current capability: 75.')\n",
        "environment",
        False,
        "high",
    ),
    "ray_node_without_a_gpu": Case(
        "ValueError: Current node has no GPU available. current_node_resource={'CPU': 96.0, 'memory': 1.0}. vLLM "
        "engine cannot start without GPU. Make sure you have at least 1 GPU available in a node "
        "current_node_id='da16' current_ip='10.0.0.1'.\n",
        "environment",
        False,
        "high",
    ),
    "cut_in_auto_weights_loader": Case(
        cut(
            frames(
                WORKER,
                (
                    "vllm/model_executor/models/utils.py",
                    "_load_module",
                    "for child_prefix, child_weights in self._groupby_prefix(weights):",
                ),
                (
                    "vllm/model_executor/models/utils.py",
                    "_groupby_prefix",
                    "for prefix, group in itertools.groupby(weights_by_parts, key=lambda x: x[0][0]):",
                ),
                (
                    "vllm/model_executor/models/utils.py",
                    "<genexpr>",
                    'weights_by_parts = ((weight_name.split(".", 1), weight_data)',
                ),
            )
        ),
        "weight_loading",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session13_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


@pytest.mark.parametrize(
    ("module", "function"),
    [
        ("vllm/v1/worker/gpu_worker.py", "determine_available_memory"),
        ("vllm/model_executor/models/utils.py", "_load_module"),
        ("vllm/v1/worker/gpu_model_runner.py", "capture_model"),
    ],
)
def test_a_source_checkout_named_vllm_reads_as_the_installed_package(module: str, function: str) -> None:
    """A clone named vllm holding the package vllm (".../vllm/vllm/v1/...") is the package's own module."""
    installed = frame_phase(f"{SITE}/{module}", function)
    assert installed is not None
    assert frame_phase(f"/vllm-workspace/vllm/{module}", function) == installed
    assert frame_phase(f"/home/user/src/vllm/{module}", function) == installed


def test_a_line_pasted_without_level_and_time_keeps_its_source() -> None:
    """ "[loggers.py:123] Engine 000: ..." (the level and timestamp cut): the message is the stats line itself, so the
    full read and the fast path's bulk count see the same stats lines (corpus case un006)."""
    rec = parse_line("[loggers.py:123] Engine 000: Avg prompt throughput: 600.0 tokens/s, Running: 5 reqs")
    assert rec.msg.startswith("Engine 000: Avg prompt throughput")
    assert rec.src == "loggers.py:123"
    assert parse_line("[not a source] Engine 000").msg == "[not a source] Engine 000"
