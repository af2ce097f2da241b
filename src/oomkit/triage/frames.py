"""Traceback frames and messages that place a failure in a phase."""

from __future__ import annotations

import re

from oomkit.triage.rules import rx

# Traceback frames → phase. The innermost startup frame wins; a serving frame counts only when no
# startup frame is in the same traceback (V0's profile_run calls execute_model).
# CPython's form, and IPython's (notebooks: `File /x/y.py:49, in Class.method(args)`, with a Markdown link
# in Jupyter: `File [~/x/y.py:49](http://...), in ...`), whose qualified name the engine cuts to the method.
FRAME = rx(
    r'File (?:"(?P<path>[^"]+)", line\s+\d+|\[?(?P<ipath>[^\s\[\]"]+\.py):\d+(?:\]\([^)\s]*\))?),\s+in (?P<func>[\w<>.]+)'
    # a traceback condensed by hand or by a tool, one frame per line: "gpu_model_runner.py:5121, in _get_prompt_logprobs"
    r"|^(?P<cpath>[\w./\\-]+\.py):\d+, in (?P<cfunc>\w+)\s*$"
)
# A frame hard-wrapped by a terminal or an issue's text box (a fixed line width): the line ends inside
# `File "path"` (at or before its closing quote) and the next line goes on with the rest of the path,
# then `", line N, in func` (CPython's frame format, traceback.FrameSummary).
# CPython's faulthandler (a fatal signal: segfault, abort, a hang's watchdog dump) prints each thread's stack
# innermost first, `File "path", line N in func` with no comma, under "Current thread 0x... (most recent call first):"
FAULT_HEADER = rx(r"(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):")
FAULT_FRAME = rx(r'File "(?P<path>[^"]+)", line \d+ in (?P<func>[\w<>.]+)')
FRAME_HEAD = rx(r'File "(?P<path>[^"]+)"?\s*$')
FRAME_TAIL = rx(r'^(?P<rest>[^\s"]*)"?, line \d+, in (?P<func>[\w<>.]+)')
# The innermost frame of a wait for a worker's reply (V1's shared-memory message queue, Ray's compiled-DAG
# channels): their only errors are the wait's timeout and a cancel when the executor shuts down, so a
# traceback that ends there, with its exception cut, is a worker that did not answer.
REPLY_WAIT_FRAME = rx(
    r"shm_broadcast\.py::(?:dequeue|acquire_read|recv)$|ray/experimental/channel/\S*::(?:read|_read_list|begin_read)$"
    r"|ray/dag/compiled_dag_node\.py::_execute_until$|multiproc_executor\.py::(?:_?wait_for_response|get_response)$"
)
# The source line under a frame that calls every worker by a method's name (V1's executors' `collective_rpc`,
# V0's `_run_workers`): `self.collective_rpc("compile_or_warm_up_model")` in the executor's
# `initialize_from_config` (v1/executor/abstract.py 0.8.5-0.2x, which runs the workers' KV set-up and then their
# warm-up and capture) names the step the RPC ran, which the engine core's own frames do not show.
RPC_CALL = rx(r"\b(?:collective_rpc|_run_workers)\(\s*[\"'](?P<method>\w+)[\"']")
# The source line under an executor frame that calls its wait for a worker's reply (multiproc_executor.py:
# `result = get_response(w, dequeue_timeout)` in `collective_rpc`, 0.8.5-0.10; `aggregate(get_response())` and
# `future._wait_for_response()`, 0.11-0.34): an excerpt cut there stands where the wait's frame would, and is read
# as that frame (a timeout unless the worker's answer, "Worker failed with error", is the failure line).
REPLY_WAIT_CALL = rx(r"\b(?:get_response|_?wait_for_response)\(")
REPLY_WAIT_CALLER = rx(r"multiproc_executor\.py::")
# The failure line of a worker's answer to that RPC: the wait ended with the worker's error, not a timeout.
WORKER_ANSWERED = rx(r"Worker failed with error")
# A frame's source line that raises a new exception with its message as a literal ('raise TimeoutError("Timed out
# waiting for engines to send"'): when the log is cut before the exception line, that source line is the one place
# the exception and its message show. Only a class named like an exception, called with a string literal.
RAISE_LINE = rx(
    r"""^raise (?P<exc>[A-Z]\w*(?:Error|Exception|Timeout|Exit))\(\s*[frbFRB]{0,2}(?P<q>["'])(?P<text>[^"']+)"""
)
# The source line under a frame that calls a start-up step directly (`self.model_runner._dummy_sampler_run(`,
# `self.model_runner.capture_model()`): CPython prints each frame's executing line, which is the call into the next
# frame, so a traceback cut (or hard-wrapped) before that frame still names the step.
STEP_CALL = rx(
    r"\.(?P<func>_dummy_sampler_run|_dummy_pooler_run|capture_model|profile_run|determine_available_memory"
    r"|determine_num_available_blocks|initialize_kv_cache|initialize_from_config|compile_or_warm_up_model"
    r"|load_model|load_weights|init_device)\("
    # a CUDA graph being captured (`with torch.cuda.graph(cudagraph, pool=...)`: V1's CUDAGraphWrapper, V0's
    # CUDAGraphRunner.capture); vLLM captures only while the worker's capture step runs
    r"|\btorch\.cuda\.graph\("
)
# The step a STEP_CALL line without a step's name calls: graph capture.
CAPTURE_STEP = "_capture_cudagraph"
# V0's engine loop waiting for a step (async_llm_engine.py `run_engine_loop` -> `asyncio.wait`, under
# asyncio_timeout(ENGINE_ITERATION_TIMEOUT_S)): a CancelledError there is the iteration timeout's cancel.
ITERATION_WAIT_FRAME = rx(r"engine/async_llm_engine\.py::run_engine_loop$")
# The innermost frame of an exception that is the installation's, not a start-up step's: an attention
# backend refusing the GPU or the settings in its constructor or selector (an assert on the FlashAttention
# version, "not supported" on a head size), or a JIT build of a kernel (FlashInfer, torch cpp_extension).
# FlashInfer's `get_*_module` functions (prefill.py, decode.py, sampling.py, ...) are its JIT loaders:
# each runs `gen_*_module(...).build_and_load()` on first use and caches the result.
# A memory error raised there keeps its phase (frames of the step around it). torch.cuda's lazy initialisation raises
# only when CUDA cannot start in the process (no driver or device, a torch built without CUDA, a forked subprocess
# re-initialising it): the step that first touched the device did not cause it.
ENV_FRAME = rx(
    r"attention/backends/\S+\.py::__init__$|attention/selector\.py::|::get_attn_backend_cls$"
    r"|::(?:build_and_load|_jit_compile|_run_ninja_build|_write_ninja_file_and_build_library|load_cuda_ops)$"
    r"|flashinfer/jit/\S+::|flashinfer/\S+\.py::get_\w+_module$|torch/utils/cpp_extension\.py::"
    r"|/torch/cuda/__init__\.py::_lazy_init$"
    # vLLM's platform layer (vllm/platforms: device detection, device ids, capability and config checks), e.g.
    # CUDA_VISIBLE_DEVICES holding MIG UUIDs that device_id_to_physical_device_id cannot read as ordinals
    r"|/vllm/platforms/\S+\.py::"
    # and a platform plugin's (vllm_ascend/platform.py NPUPlatform.set_device), or torch binding the process to its
    # device (torch.cuda.set_device, torch_npu's torch.npu.set_device): the driver or runtime refused the device
    r"|/vllm_\w+/platform\.py::|/torch/(?:cuda|xpu)/__init__\.py::set_device$|/torch_npu/npu/utils\.py::set_device$"
)
# Substrings of a frame's function (or path). `load_model` is not the model registry's `load_model_cls` /
# `_try_load_model_cls`: they import the model's class, which the registry's inspection does while the
# config is built (`ModelConfig` -> `inspect_model_cls` -> `load_model_cls`), long before `load_model`.
# The worker's warm-up step is graph capture's root: V1's `compile_or_warm_up_model` (gpu_worker.py, 0.6.6-0.34:
# the compile sizes' warm-up runs, logged "Compile and warming up model for size", then `capture_model`, then
# the sampler warm-up, whose own frame `_dummy_sampler_run` is inner and wins) and V0's `_warm_up_model`
# (worker.py: `capture_model` only); the mined table roots capture there too.
FRAME_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        rx(
            r"capture_model|capture_end|_capture_cudagraph|cudagraph|CUDAGraph|graph_capture|compile_or_warm_up_model|_warm_up_model"
            # Dynamo translating a frame (not running compiled code, which `eval_frame` and `aot_compile` frames do in
            # every serving step): torch.compile, which the phase vocabulary files with graph capture
            r"|torch/_dynamo/(?:convert_frame|symbolic_convert)\.py::"
            # the compilers Dynamo hands the graph to (run only while compiling): vLLM's backend (VllmBackend,
            # its piecewise split and CompilerManager), Inductor's compile_fx, AOT compilation of the full graph
            r"|vllm/compilation/backends\.py::|torch/_inductor/compile_fx\.py::|torch/_dynamo/aot_compile\.py::aot_compile"
            # a graph being captured: torch.cuda.graph's and torch_npu's graph methods that run only while a graph is
            # captured (not CUDAGraph.replay, in the same file, which every serving step with graphs runs)
            r"|(?:torch/cuda|torch_npu/npu)/graphs\.py::(?:capture_begin|capture_end|__enter__|__exit__)$"
        ),
        "cudagraph_capture",
    ),
    (rx(r"_dummy_sampler_run|_dummy_pooler_run"), "memory_profiling"),
    # Sleep mode's wake-up (LLM.wake_up -> EngineCore.wake_up -> Worker.wake_up -> CuMemAllocator.wake_up, vLLM
    # 0.7.3+) maps the slept weights and KV cache back; the KV pool, sized to fill the device, is what a trainer left
    # holding memory leaves no room for. The corpus files wake-up OOMs with KV-cache allocation.
    (rx(r"^wake_up$"), "kv_cache_allocation"),
    (
        rx(
            r"initialize_kv_cache|allocate_kv_cache|_allocate_kv_cache|init_kv_cache|initialize_cache|_init_cache|_reshape_kv_cache|bind_kv_cache|initialize_from_config"
        ),
        "kv_cache_allocation",
    ),
    (
        rx(r"determine_available_memory|determine_num_available_blocks|profile_run|memory_profiling"),
        "memory_profiling",
    ),
    (
        rx(
            r"load_model(?!_cls)|load_weights|model_loader|weights_iterator|initialize_model|_initialize_model|load_state_dict|safe_open"
            # torch's Module.to(device) walk (`_apply` -> `convert` -> `t.to(device)`): the built model moved onto
            # the device, which loaders do once, while loading (V0 XPU/HPU/CPU runners, bitsandbytes, GGUF)
            r"|torch/nn/modules/module\.py::(?:_apply|convert)$"
            # a quantization method built for a layer while the model is constructed (serving runs only `apply`)
            r"|/vllm/model_executor/layers/quantization/\S+::(?:get_quant_method|get_moe_method|create_weights)$"
            # AutoWeightsLoader's recursion over the checkpoint (models/utils.py, 0.6-0.34), which the mined call
            # graph does not follow from its `load_weights`
            r"|/vllm/model_executor/models/utils\.py::(?:_load_module|_groupby_prefix|_load_param|_add_loadable_non_param_tensors)$"
        ),
        "weight_loading",
    ),
    (
        rx(r"init_device|init_worker_distributed_environment|initialize_model_parallel|init_distributed"),
        "distributed_init",
    ),
)
# Helpers several start-up steps call: V1's `_dummy_run` runs the profiling pass *and* each graph
# capture. Such a frame places a failure only when no caller in the same traceback names the step.
SHARED_STARTUP_FRAMES: tuple[tuple[re.Pattern[str], str], ...] = ((rx(r"^_dummy_run$"), "memory_profiling"),)
# The API server's side of serving counts too: V1's AsyncLLM output handler (it pulls the engine core's
# outputs; the core that fails at start-up never gets it constructed), V0's background engine loop
# (started by the first request: AsyncLLMEngine.add_request -> start_background_loop; MQLLMEngine.start
# runs it after run_startup_loop) and the loop task's done-callback (_log_task_completion from 0.6,
# _raise_exception_on_finish before), which raises AsyncEngineDeadError.
SERVING_FRAME = rx(
    r"execute_model|run_busy_loop|_process_engine_step|step_with_batch_queue|sample_tokens|^step$|generate|_run_engine"
    r"|^output_handler$|^get_output_async$|^run_engine_loop$|^engine_step$|^_raise_exception_on_finish$|^_log_task_completion$"
)
# V0 (0.6.x) wraps the GPU model runner's `execute_model` in `dump_input_when_exception`, whose inner
# function is `model_runner_base.py::_wrapper`: a traceback cut below it stands where `execute_model`
# would, and counts the same way (serving, unless a start-up frame such as `profile_run` is above it).
# The request path is serving too: the OpenAI server's request handlers (vllm/entrypoints/openai/serving_*.py; from
# 0.2x also <endpoint>/serving.py), uvicorn handling an HTTP request (run_asgi), and the engine core taking in a request
# (V1 core.py preprocess_add_request, add_request): none of them runs before the server is up. Nor do the tool-call and
# reasoning parsers (vllm/entrypoints/openai/tool_parsers/ to 0.12, vllm/tool_parsers/ and vllm/reasoning/ after),
# which read a request's generated text; their managers' modules (abstract_tool_parser.py, abs_reasoning_parsers.py)
# are not, since the configuration looks a named parser up while it is built.
SERVING_PATH_FRAME = rx(
    r"worker/model_runner_base\.py::_wrapper$"
    r"|/vllm/entrypoints/openai/(?:\w+/)?serving(?:_\w+)?\.py::"
    r"|/vllm/(?:entrypoints/openai/)?tool_parsers/(?!abstract_)\w+\.py::|/vllm/reasoning/(?!abs_)\w+\.py::"
    r"|/uvicorn/protocols/http/\w+_impl\.py::run_asgi$"
    r"|/vllm/v1/engine/core\.py::(?:preprocess_add_request|add_request)$"
)


# Frames that run the model's forward pass: a model's `forward`, torch.fx's compiled graph module, Dynamo's wrapper of
# compiled code. After the KV pool is sized, start-up runs the model again only to warm up and capture graphs (V1's
# `compile_or_warm_up_model` after `initialize_kv_cache`, V0's `_warm_up_model` after `initialize_cache`): allocating
# the pool runs no forward pass.
MODEL_RUN_FRAME = rx(
    r"/vllm/model_executor/models/\S+::forward$|torch/fx/graph_module\.py::(?:__call__|call_wrapped)$"
    r"|torch/_dynamo/eval_frame\.py::_fn$"
)


def is_serving_frame(frame: str) -> bool:
    """`frame` is "path::function"; the serving path by its function's name, or by a wrapper's path."""
    return bool(SERVING_FRAME.search(frame.rsplit("::", 1)[-1]) or SERVING_PATH_FRAME.search(frame))


# Messages only vLLM's model-execution path prints (V0 dumps the failed batch's input): serving. And
# the dead-engine errors of a running server: V1's EngineDeadError ("EngineCore encountered an issue",
# raised by the core client once a started core dies; a core that dies while starting raises "Engine
# core initialization failed" instead), V0's AsyncEngineDeadError from the background loop's callback.
# V1's engine core process logs "EngineCore encountered a fatal error" only once the engine core was built
# (run_engine_core: `if engine_core is None: "EngineCore failed to start." else: "... encountered a fatal
# error."`, 0.8.5-0.32; building it profiles, sizes the KV cache and captures graphs), so the failure was in
# its busy loop; V0's "Engine background task failed" is the done-callback of the loop a started engine runs.
# The dead-engine errors: only a started engine prints them, whatever start-up markers came before.
STARTED_ENGINE = rx(
    r"EngineCore encountered (?:an issue|a fatal error)|Engine background task failed|AsyncLLM output_handler failed"
    r"|Background loop has errored already"
)
SERVING_MESSAGE = rx(
    r"Error in model execution|Writing input of failed execution|Dumping (?:input data for V1|scheduler output for model execution|scheduler stats)"
    r"|Task finished unexpectedly\. This should never happen|" + STARTED_ENGINE.pattern
)
PREFILL_FRAME = rx(r"prompt_logprobs|_prepare_prompt|_get_prompt_logprob|prefill")
DECODE_FRAME = rx(r"_prepare_decode|swap_out|_preempt_by_swap|decode")
# FlashInfer's modules by their path: flashinfer/decode.py holds the decode wrappers
# (BatchDecodeWithPagedKVCacheWrapper.run, which vLLM's FlashInfer backend calls for the decode part of a
# batch), flashinfer/prefill.py the prefill ones; their methods are all `run`/`forward`.
PREFILL_PATH = rx(r"/flashinfer/prefill\.py::")
DECODE_PATH = rx(r"/flashinfer/decode\.py::")
# V1's failed-step dump (vllm/logging_utils/dump_input.py, 0.9-0.34) prints the SchedulerOutput of the step that
# raised: the requests scheduled for the first time (`scheduled_new_reqs`, a prompt's first chunk) and the tokens
# each request runs in it (`num_scheduled_tokens`, a dict printed with bare keys).
BATCH = rx(r"SchedulerOutput\(scheduled_new_reqs=(?P<new>\[\]?)")
BATCH_COUNTS = re.compile(r"num_scheduled_tokens=\{(?P<counts>[^{}]*)\}")
BATCH_SPEC = re.compile(r"scheduled_spec_decode_tokens=\{\}")


def batch_step_kind(msg: str) -> str | None:
    """ "prefill" or "decode" from a failed step's SchedulerOutput: a new request, or a request running more than
    one token (a chunk of its prompt), is prefill; one token per running request and no new one is a decode step.
    None when the dump does not say (speculative tokens make a decode step run several tokens per request)."""
    m = BATCH.search(msg)
    if m is None:
        return None
    if m.group("new") != "[]":
        return "prefill"
    counts = BATCH_COUNTS.search(msg, m.end())
    tokens = [int(n) for n in re.findall(r":\s*(\d+)", counts.group("counts"))] if counts else []
    if not tokens or not BATCH_SPEC.search(msg, m.end()):
        return None
    return "decode" if max(tokens) == 1 else "prefill"


# The failed-step dump's lines, known by the logger's location in vLLM's header ("ERROR 11-01 10:54:19
# [dump_input.py:79]"): it logs the whole dump line by line (the config, the SchedulerOutput, tensors of multimodal
# inputs), so an excerpt that keeps only a stretch of the dump, or cuts its first line ("Dumping in"), is still the
# failed step's dump.
DUMP_SOURCE = rx(r"\[dump_input\.py:\d+\]")


def dumped(level: str | None, src: str | None) -> bool:
    """A line vLLM's failed-step dump logged at error level (its header names vllm/logging_utils/dump_input.py)."""
    return level == "ERROR" and src is not None and src.startswith("dump_input.py:")
