"""The kinds of misses issue 13 names, each in forms the other tests do not cover: small logs built for
the test from the lines and frames vLLM's source prints (the release each form comes from is noted;
nothing is copied from the corpus). Each case: the verdict's phase and is_oom, and where the kind fixes
it, the confidence."""

from __future__ import annotations

import pytest
from _triage_synth import Case, frames, verdict_of

from oomkit.triage import analyse

CORE = "(EngineCore_DP0 pid=2210) ERROR 09-14 10:02:11 [core.py:718] "  # 0.10.2's engine-core header
WORKER = "(VllmWorker TP0 pid=2301) ERROR 09-14 10:02:11 [multiproc_executor.py:596] "  # 0.10.2's worker
INFO = "(EngineCore_DP0 pid=2210) INFO 09-14 10:01:{s:02d} [{src}] "
KV_SIZED = (
    INFO.format(s=40, src="gpu_worker.py:276")
    + "Available KV cache memory: 41.20 GiB\n"
    + INFO.format(s=41, src="kv_cache_utils.py:849")
    + "GPU KV cache size: 337,488 tokens\n"
)
CAPTURED = INFO.format(s=58, src="gpu_model_runner.py:2708") + "Graph capturing finished in 12 secs, took 0.61 GiB\n"

# 0.10.2 (v1/executor/abstract.py): the executor's initialize_from_config runs the workers' KV set-up,
# then compile_or_warm_up_model (compile sizes, capture_model, the sampler warm-up) over collective_rpc.
CORE_INIT = (
    (
        "vllm/v1/engine/core.py",
        "__init__",
        "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(",
    ),
    ("vllm/v1/engine/core.py", "_initialize_kv_caches", "self.model_executor.initialize_from_config(kv_cache_configs)"),
)
CORE_WARM = (
    *CORE_INIT,
    ("vllm/v1/executor/abstract.py", "initialize_from_config", 'self.collective_rpc("compile_or_warm_up_model")'),
    ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "result = get_response(w, dequeue_timeout)"),
    ("vllm/v1/executor/multiproc_executor.py", "get_response", "raise RuntimeError("),
)
CORE_KV = (
    *CORE_INIT,
    ("vllm/v1/executor/abstract.py", "initialize_from_config", 'self.collective_rpc("initialize_from_config",'),
    ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "result = get_response(w, dequeue_timeout)"),
    ("vllm/v1/executor/multiproc_executor.py", "get_response", "raise RuntimeError("),
)
WORKER_FAILED = "RuntimeError: Worker failed with error '{}', please check the stack trace above for the root cause\n"
PLAIN_OOM = (
    "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB "
    "is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory "
    "70.12 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated."
)
SAMPLER_OOM = (
    "CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering "
    "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
)
SAMPLER_FRAMES = (
    ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model", "self.model_runner._dummy_sampler_run("),
    ("vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run", "sampler_output = self.sampler(logits=logits,"),
    ("vllm/v1/sample/sampler.py", "forward", "logits = self.apply_logits_processors(logits, sampling_metadata)"),
)
CAPTURE_FRAMES = (
    ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model", "self.model_runner.capture_model()"),
    ("vllm/v1/worker/gpu_model_runner.py", "capture_model", "self._capture_cudagraphs("),
    ("vllm/v1/worker/gpu_model_runner.py", "_capture_cudagraphs", "self._dummy_run(num_tokens,"),
    ("vllm/v1/worker/gpu_model_runner.py", "_dummy_run", "outputs = self.model("),
    ("vllm/compilation/cuda_graph.py", "__call__", "with torch.cuda.graph(cudagraph, pool=self.graph_pool):"),
    ("torch/cuda/graphs.py", "__exit__", "self.cuda_graph.capture_end()"),
)
# 0.6.6 (V0): the PyNccl communicator built while the model-parallel groups are set up.
PYNCCL_V0 = (
    ("vllm/worker/worker.py", "init_device", "init_worker_distributed_environment(self.parallel_config, self.rank,"),
    ("vllm/worker/worker.py", "init_worker_distributed_environment", "ensure_model_parallel_initialized("),
    ("vllm/distributed/parallel_state.py", "ensure_model_parallel_initialized", "initialize_model_parallel("),
    ("vllm/distributed/parallel_state.py", "initialize_model_parallel", "_TP = init_model_parallel_group("),
    ("vllm/distributed/parallel_state.py", "init_model_parallel_group", "return GroupCoordinator("),
    ("vllm/distributed/parallel_state.py", "__init__", "self.pynccl_comm = PyNcclCommunicator("),
    ("vllm/distributed/device_communicators/pynccl.py", "__init__", "self.all_reduce(data)"),
    (
        "vllm/distributed/device_communicators/pynccl.py",
        "all_reduce",
        "self.nccl.ncclAllReduce(buffer_type(tensor.data_ptr()),",
    ),
)
# 0.10.2 (V1): model construction inside load_model: a layer's create_weights allocates its tensors.
CONSTRUCTION = (
    ("vllm/model_executor/models/llama.py", "__init__", "self.mlp = LlamaMLP("),
    ("vllm/model_executor/models/llama.py", "__init__", "self.gate_up_proj = MergedColumnParallelLinear("),
    ("vllm/model_executor/layers/linear.py", "__init__", "self.quant_method.create_weights("),
    (
        "vllm/model_executor/layers/linear.py",
        "create_weights",
        "weight = Parameter(torch.empty(sum(output_partition_sizes),",
    ),
    ("torch/utils/_device.py", "__torch_function__", "return func(*args, **kwargs)"),
)
# 0.6.6 (V0, Python 3.10): the engine loop's wait for a step, under asyncio_timeout(ENGINE_ITERATION_TIMEOUT_S).
ITERATION_WAIT = (
    ("vllm/engine/async_llm_engine.py", "run_engine_loop", "done, _ = await asyncio.wait("),
    ("asyncio/tasks.py", "wait", "return await _wait(fs, timeout, return_when, loop)"),
    ("asyncio/tasks.py", "_wait", "await waiter"),
)
V0 = "ERROR 12-10 08:15:02 [async_llm_engine.py:65] "
DEAD = (
    "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This should never happen! "
    "Please open an issue on Github. See stack trace above for the actual cause.\n"
)
STATS_V1 = (
    "(APIServer pid=2100) INFO 09-14 10:20:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {p} tokens/s, "
    "Avg generation throughput: {g} tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: 61.2%, "
    "Prefix cache hit rate: 12.0%\n"
)
READY = "(APIServer pid=2100) INFO 09-14 10:10:00 [launcher.py:37] Application startup complete.\n"
STEP = (
    ("vllm/v1/engine/core.py", "run_busy_loop", "self._process_engine_step()"),
    ("vllm/v1/engine/core.py", "step", "model_output = self.execute_model_with_error_logging("),
    ("vllm/v1/worker/gpu_model_runner.py", "execute_model", "model_output = self.model("),
)
# 0.10.2's failed-step dump (logging_utils/dump_input.py): the SchedulerOutput's anon_repr, one line.
DUMP = (
    "(EngineCore_DP0 pid=2210) ERROR 09-14 10:20:31 [dump_input.py:79] Dumping scheduler output for model execution: "
    "SchedulerOutput(scheduled_new_reqs={new}, scheduled_cached_reqs=CachedRequestData(req_ids={ids}, "
    "resumed_from_preemption=[false, false], new_token_ids=[], new_block_ids=[null, null], "
    "num_computed_tokens=[812, 1590]), num_scheduled_tokens={counts}, total_num_scheduled_tokens={total}, "
    "scheduled_spec_decode_tokens={{}}, scheduled_encoder_inputs={{}}, num_common_prefix_blocks=[0], "
    "finished_req_ids=[], free_encoder_input_ids=[], structured_output_request_ids={{}}, grammar_bitmask=null, "
    "kv_connector_metadata=null)\n"
)
NEW_REQ = (
    "[NewRequestData(req_id=cmpl-9f1,prompt_token_ids_len=7210,mm_kwargs=[],mm_hashes=[],mm_positions=[],"
    "sampling_params=SamplingParams(n=1, temperature=0.7, max_tokens=512),block_ids=([1, 2, 3],),"
    "num_computed_tokens=0,lora_request=None)]"
)
TORCH_OOM = "torch.OutOfMemoryError: " + PLAIN_OOM + "\n"


def decode_dump() -> str:
    return DUMP.format(new="[]", ids="['cmpl-a1', 'cmpl-b2']", counts="{cmpl-a1: 1, cmpl-b2: 1}", total=2)


def prefill_dump() -> str:
    return DUMP.format(
        new=NEW_REQ, ids="['cmpl-a1', 'cmpl-b2']", counts="{cmpl-9f1: 7210, cmpl-a1: 1, cmpl-b2: 1}", total=7212
    )


CASES: dict[str, Case] = {
    # -- "CUDA out of memory occurred when warming up sampler" (profiling) ------------------------------
    # 0.10.2, TP 2: the worker's chained traceback, then the engine core's RPC error quoting it.
    "sampler_worker_and_core": Case(
        KV_SIZED
        + CAPTURED
        + frames(WORKER, *SAMPLER_FRAMES)
        + WORKER
        + TORCH_OOM
        + WORKER
        + "\n"
        + WORKER
        + "The above exception was the direct cause of the following exception:\n"
        + frames(WORKER, SAMPLER_FRAMES[0], SAMPLER_FRAMES[1])
        + WORKER
        + "RuntimeError: "
        + SAMPLER_OOM
        + "\n"
        + CORE
        + "EngineCore failed to start.\n"
        + frames(CORE, *CORE_WARM)
        + CORE
        + WORKER_FAILED.format(SAMPLER_OOM),
        "memory_profiling",
        True,
        "high",
    ),
    # The same with only the engine core's side in the excerpt: its frames are the RPC, the message names the step.
    "sampler_core_only": Case(
        CORE + "EngineCore failed to start.\n" + frames(CORE, *CORE_WARM) + CORE + WORKER_FAILED.format(SAMPLER_OOM),
        "memory_profiling",
        True,
        "high",
    ),
    # 0.32's pooling runner: the pooler's warm-up, the same step for embedding models.
    "pooler_warmup": Case(
        CORE + "RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 256 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n",
        "memory_profiling",
        True,
    ),
    # -- a traceback through capture_model -------------------------------------------------------------
    # 0.10.2: the worker's capture frames down to torch.cuda.graph's capture_end, a plain OOM.
    "capture_worker_frames": Case(
        KV_SIZED + frames(WORKER, *CAPTURE_FRAMES) + WORKER + TORCH_OOM,
        "cudagraph_capture",
        True,
        "high",
    ),
    # The same OOM seen only from the engine core (TP 2): its frames stop at the executor's
    # initialize_from_config, whose source line names the step it ran over RPC, compile_or_warm_up_model:
    # not the KV cache's allocation; the capture progress the workers logged places it.
    "capture_core_only": Case(
        KV_SIZED
        + "(VllmWorker TP0 pid=2301) INFO 09-14 10:01:45 [gpu_model_runner.py:2598] Capturing CUDA graphs (mixed "
        "prefill-decode, PIECEWISE):  42%|████▏     | 28/67 [00:04<00:06,  6.12it/s]\n"
        + CORE
        + "EngineCore failed to start.\n"
        + frames(CORE, *CORE_WARM)
        + CORE
        + WORKER_FAILED.format(PLAIN_OOM),
        "cudagraph_capture",
        True,
    ),
    # The same RPC with its source line naming the workers' initialize_from_config: the KV cache tensors.
    "kv_rpc_core_only": Case(
        KV_SIZED
        + CORE
        + "EngineCore failed to start.\n"
        + frames(CORE, *CORE_KV)
        + CORE
        + WORKER_FAILED.format(PLAIN_OOM),
        "kv_cache_allocation",
        True,
    ),
    # 0.6.6 (V0): _warm_up_model -> capture_model -> CUDAGraphRunner.capture, a plain OOM.
    "capture_v0": Case(
        frames(
            "",
            ("vllm/worker/worker.py", "_warm_up_model", "self.model_runner.capture_model(self.gpu_cache)"),
            ("vllm/worker/model_runner.py", "capture_model", "graph_runner.capture(**capture_inputs)"),
            ("vllm/worker/model_runner.py", "capture", "self.model("),
            ("vllm/model_executor/models/llama.py", "forward", "hidden_states = self.model(input_ids, positions,"),
        )
        + TORCH_OOM,
        "cudagraph_capture",
        True,
        "high",
    ),
    # -- PyNcclCommunicator stacks -----------------------------------------------------------------------
    # 0.6.6: the stack cut inside the communicator's first all_reduce (no exception line): the network.
    "pynccl_cut": Case(frames("", *PYNCCL_V0), "network_communication", False),
    # 0.6.6: pynccl_wrapper's NCCL_CHECK raises "NCCL error: <ncclGetErrorString>".
    "pynccl_error": Case(
        frames(
            "",
            *PYNCCL_V0,
            (
                "vllm/distributed/device_communicators/pynccl_wrapper.py",
                "NCCL_CHECK",
                'raise RuntimeError(f"NCCL error: {error_str}")',
            ),
        )
        + "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n",
        "network_communication",
        False,
        "high",
    ),
    # -- a Ray placement-group wait ----------------------------------------------------------------------
    # 0.10.2 (executor/ray_utils.py, _wait_until_pg_ready): the wait ran out (PG_WAIT_TIMEOUT) and raised.
    "placement_gave_up": Case(
        "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0, 'node:10.0.0.1': 0.001}, "
        "{'GPU': 1.0}] within 1800 seconds. See `ray status` and `ray list nodes` to make sure the cluster has "
        "enough resources.\n",
        "network_communication",
        False,
    ),
    # -- a lone out-of-memory line ----------------------------------------------------------------------
    # torch 2.0/2.1's wording (torch.cuda.OutOfMemoryError, "(GPU 0; X total capacity; ...)"). PyTorch had freed and
    # cached 2.38 GiB (a forward pass had run) and held 81% of the device (no KV pool yet): the profiling pass.
    "lone_torch21": Case(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total "
        "capacity; 19.12 GiB already allocated; 1.02 GiB free; 21.50 GiB reserved in total by PyTorch)\n",
        "memory_profiling",
        True,
        "low",
    ),
    # Under a torchrun rank prefix, and under V1's engine-core header (1.21 GiB freed and cached, 89% of the device
    # held: the profiling pass, as above).
    "lone_rank_prefix": Case("[rank0]: " + TORCH_OOM, "memory_profiling", True, "low"),
    "lone_core_header": Case(CORE + TORCH_OOM, "memory_profiling", True, "low"),
    # ROCm's wording.
    "lone_hip": Case(
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
        "191.98 GiB of which 512.00 MiB is free.\n",
        "serving_prefill",
        True,
        "low",
    ),
    # -- decode vs prefill --------------------------------------------------------------------------------
    # 0.10.2: the failed step's dump shows no new request and one token per running request: a decode step.
    "decode_by_batch": Case(
        READY
        + decode_dump()
        + CORE
        + "EngineCore encountered a fatal error.\n"
        + frames(CORE, *STEP)
        + CORE
        + TORCH_OOM,
        "serving_decode",
        True,
        "medium",
    ),
    # The same dump with a new 7,210-token prompt in the step: prefill.
    "prefill_by_batch": Case(
        READY
        + prefill_dump()
        + CORE
        + "EngineCore encountered a fatal error.\n"
        + frames(CORE, *STEP)
        + CORE
        + TORCH_OOM,
        "serving_prefill",
        True,
        "medium",
    ),
    # The batch wins over an older stats line that still showed prompt throughput.
    "decode_by_batch_over_stats": Case(
        READY
        + STATS_V1.format(s=20, p="3200.0", g="410.0", r=24, w=0)
        + decode_dump()
        + CORE
        + "EngineCore encountered a fatal error.\n"
        + frames(CORE, *STEP)
        + CORE
        + TORCH_OOM,
        "serving_decode",
        True,
        "medium",
    ),
    # FlashInfer's decode wrapper (flashinfer/decode.py, BatchDecodeWithPagedKVCacheWrapper.run) failing.
    "decode_by_flashinfer": Case(
        READY
        + frames(
            CORE,
            *STEP,
            ("vllm/v1/attention/backends/flashinfer.py", "forward", "decode_wrapper.run("),
            ("flashinfer/decode.py", "run", "out = torch.empty_like(q)"),
        )
        + CORE
        + TORCH_OOM,
        "serving_decode",
        True,
        "medium",
    ),
    # Nothing tells: no stats, no dump, no step-kind frame: the confidence says so.
    "serving_untold": Case(
        READY + CORE + "EngineCore encountered a fatal error.\n" + frames(CORE, *STEP) + CORE + TORCH_OOM,
        "serving_prefill",
        True,
        "low",
    ),
    # -- "Failed to create unquantized linear weights" / model construction ------------------------------
    # 0.10.2: a plain OOM in a layer's create_weights while the model is built (inside load_model).
    "construction_oom": Case(frames(CORE, *CONSTRUCTION) + CORE + TORCH_OOM, "weight_loading", True),
    # -- "Engine iteration timed out" (timeout) ----------------------------------------------------------
    # 0.6.6 on Python 3.10: the wait cancelled by asyncio_timeout, then asyncio's TimeoutError, the line that
    # says "Engine iteration timed out" not in the excerpt.
    "iteration_asyncio_timeout": Case(
        frames(
            V0,
            ("vllm/engine/async_llm_engine.py", "_log_task_completion", "return_value = task.result()"),
            *ITERATION_WAIT,
        )
        + V0
        + "asyncio.exceptions.CancelledError\n"
        + V0
        + "\n"
        + V0
        + "During handling of the above exception, another exception occurred:\n"
        + frames(
            V0,
            (
                "vllm/engine/async_llm_engine.py",
                "run_engine_loop",
                "async with asyncio_timeout(ENGINE_ITERATION_TIMEOUT_S):",
            ),
        )
        + V0
        + "asyncio.exceptions.TimeoutError\n"
        + DEAD,
        "timeout",
        False,
    ),
    # The API server's side only: the loop's wait cancelled, then the dead engine on a request.
    "iteration_cancelled": Case(
        frames("", *ITERATION_WAIT) + "asyncio.exceptions.CancelledError\n" + DEAD,
        "timeout",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_issue_kind(name, tmp_path):
    case = CASES[name]
    verdict = verdict_of(name, case, tmp_path)
    assert (verdict.phase, verdict.is_oom) == (case.phase, case.is_oom), (
        f"{verdict.summary} / {verdict.confidence_reason}"
    )
    if case.confidence:
        assert verdict.confidence == case.confidence, verdict.confidence_reason


# -- a vLLM template raised inside a helper several start-up steps call (round 4's "left for later") -----
# 0.27-0.34's multimodal/gpu_ipc_memory.py `reserve_mm_ipc_gpu_memory` is called from the profiling pass
# (gpu_worker.py determine_available_memory) and from the KV cache's sizing: the frame table marks it
# `shared`, so its template's mined phase (its nearest root's) does not place the error; the log does.
MM_RESERVE = (
    "ValueError: frontend multimodal GPU decoding reserves 6.00 GiB (4.00 GiB raw-frame budget, 2.00 GiB decoder "
    "cache budget), but only 3.50 GiB is available for the KV cache. Reduce mm_ipc_gpu_memory_gb or hw_decoders, "
    "use a different video backend, or increase gpu_memory_utilization.\n"
)


def test_a_shared_helpers_template_is_placed_by_the_logs_markers(tmp_path):
    log = tmp_path / "mm_reserve.log"
    log.write_text(
        INFO.format(s=40, src="gpu_worker.py:276") + "Available KV cache memory: 3.50 GiB\n" + CORE + MM_RESERVE
    )
    verdict = analyse([str(log)]).verdict
    assert (verdict.phase, verdict.is_oom, verdict.decided_by) == ("kv_cache_allocation", True, "marker"), (
        verdict.summary
    )


def test_a_shared_helpers_template_is_placed_by_the_logs_frames(tmp_path):
    log = tmp_path / "mm_reserve_frames.log"
    path = (
        ("vllm/v1/worker/gpu_worker.py", "determine_available_memory", "return reserve_mm_ipc_gpu_memory("),
        ("vllm/multimodal/gpu_ipc_memory.py", "reserve_mm_ipc_gpu_memory", "raise ValueError("),
    )
    log.write_text(frames(CORE, *path) + CORE + MM_RESERVE)
    verdict = analyse([str(log)]).verdict
    assert (verdict.phase, verdict.is_oom, verdict.decided_by) == ("memory_profiling", True, "frames"), verdict.summary
