"""Issue 13, round 6: classes of wrong answers, each settled from vLLM's (or PyTorch's, CUDA's) source rather than
from a log. Small logs built for the test from the lines and frames those sources print (the release each form
comes from is noted; nothing is copied from the corpus). Each case: the verdict's phase, is_oom and confidence."""

from __future__ import annotations

import pytest
from _triage_synth import Case, frames, verdict_of

CORE = "(EngineCore_DP0 pid=2210) ERROR 06-15 13:57:57 [core.py:517] "  # a V1 engine core's error header
DUMP = "(EngineCore_DP0 pid=2210) ERROR 06-15 13:57:57 [dump_input.py:79] "
API = "(APIServer pid=1) INFO 06-15 13:50:{s:02d} [{src}] "


# A failed serving step (0.9-0.10): the core dumps the step's batch, then its busy loop's traceback down to the
# executor's collective_rpc, whose source line is the call of its reply wait (multiproc_executor.py 0.8.5-0.10:
# `result = get_response(w, dequeue_timeout)`; 0.11-0.34: `aggregate(get_response())`).
STEP_DUMP = (
    f"{DUMP}Dumping scheduler output for model execution:\n"
    f"{DUMP}SchedulerOutput(scheduled_new_reqs=[], scheduled_cached_reqs=[], "
    "num_scheduled_tokens={chatcmpl-1: 1}, total_num_scheduled_tokens=1, scheduled_spec_decode_tokens={})\n"
    f"{CORE}EngineCore encountered a fatal error.\n"
)
BUSY_LOOP = (
    ("vllm/v1/engine/core.py", "run_engine_core", "engine_core.run_busy_loop()"),
    ("vllm/v1/engine/core.py", "run_busy_loop", "self._process_engine_step()"),
    ("vllm/v1/engine/core.py", "_process_engine_step", "outputs, model_executed = self.step_fn()"),
    ("vllm/v1/engine/core.py", "step", "model_output = self.execute_model_with_error_logging("),
    ("vllm/v1/executor/multiproc_executor.py", "execute_model", "(output, ) = self.collective_rpc("),
)
RPC_WAIT_0_9 = ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "result = get_response(w, dequeue_timeout)")
RPC_WAIT_0_11 = ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "return aggregate(get_response())")
CUT = "[...]\n"  # an excerpt cut there: the exception line is not in the log

WORKER = "(VllmWorker rank=1 pid=477) ERROR 07-22 12:55:39 [multiproc_executor.py:618] "
SAMPLER = (
    ("torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
    ("vllm/v1/sample/sampler.py", "forward", "sampled = self.sample(logits, sampling_metadata)"),
    ("vllm/v1/sample/sampler.py", "sample", "random_sampled = self.topk_topp_sampler("),
)

READY = (
    API.format(s=1, src="api_server.py:1818")
    + "Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    + API.format(s=2, src="launcher.py:29")
    + "Available routes are:\n"
    + "INFO:     Application startup complete.\n"
)


CASES: dict[str, Case] = {
    # -- a cut traceback that stops at the executor's call of its reply wait is the wait's (a worker that did not
    # answer), as one that shows the wait's own frame is; it was `not_oom_other` (a serving crash) before.
    "reply_wait_call_0_9": Case(STEP_DUMP + frames(CORE, *BUSY_LOOP, RPC_WAIT_0_9) + CUT, "timeout", False, "low"),
    "reply_wait_call_0_11": Case(STEP_DUMP + frames(CORE, *BUSY_LOOP, RPC_WAIT_0_11) + CUT, "timeout", False, "low"),
    # The worker answered with its error (get_response raises "Worker failed with error"): not a timeout, also for
    # the wrapper line printed above the traceback (it shares the frames).
    "reply_wait_answered": Case(
        STEP_DUMP
        + frames(
            CORE,
            *BUSY_LOOP,
            RPC_WAIT_0_9,
            ("vllm/v1/executor/multiproc_executor.py", "get_response", "raise RuntimeError("),
        )
        + f"{CORE}RuntimeError: Worker failed with error 'boom', please check the stack trace above for the root cause\n",
        "not_oom_other",
        False,
        # the wrapper quotes the worker's exception ('boom'), which is then the exception line (session 17): its
        # message is in the log, its traceback is not
        "medium",
    ),
    # A source line that calls something else under collective_rpc adds nothing: still a serving crash, cut.
    "rpc_other_call": Case(
        STEP_DUMP
        + frames(
            CORE,
            *BUSY_LOOP,
            ("vllm/v1/executor/multiproc_executor.py", "collective_rpc", "self.rpc_broadcast_mq.enqueue("),
        )
        + CUT,
        "not_oom_other",
        False,
        "low",
    ),
    # -- any TimeoutError is a wait that ran out: every `raise TimeoutError` in vLLM 0.6.6-0.34 ends a wait for a
    # worker, an engine, a peer or a server (here 0.6.x's MQLLMEngine client and concurrent.futures' spelling).
    "timeouterror_mq_client": Case(
        frames(
            "",
            ("vllm/engine/multiprocessing/client.py", "_send_get_data_rpc_request", "raise TimeoutError("),
        )
        + "TimeoutError: Server didn't reply within 10000 ms\n",
        "timeout",
        False,
        "high",
    ),
    "timeouterror_futures": Case(
        frames("", ("vllm/v1/engine/core_client.py", "call_utility", "return future.result(timeout=t)"))
        + "concurrent.futures._base.TimeoutError: EngineCore did not answer\n",
        "timeout",
        False,
        "high",
    ),
    "ray_get_timeout": Case(
        frames("", ("ray/_private/worker.py", "get", "raise GetTimeoutError("))
        + "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n",
        "timeout",
        False,
        "high",
    ),
    # A download's read timeout (urllib3) is no TimeoutError: it stays out of the timeout class.
    "read_timeout_not_hang": Case(
        frames("", ("urllib3/connectionpool.py", "_make_request", "raise ReadTimeoutError("))
        + "urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out.\n",
        "not_oom_other",
        False,
        "low",
    ),
    # -- the installation's CUDA set-up (cudaGetErrorString texts; torch/cuda/__init__.py _lazy_init;
    # triton/runtime/build.py), wherever raised: environment.
    "cuda_no_device": Case(
        frames("", ("torch/cuda/__init__.py", "_lazy_init", "torch._C._cuda_init()"))
        + "RuntimeError: CUDA error: no CUDA-capable device is detected\n",
        "environment",
        False,
        "high",
    ),
    "cuda_busy": Case(
        frames("", ("vllm/worker/worker.py", "init_device", "torch.cuda.set_device(self.device)"))
        + "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n",
        "environment",
        False,
        "high",
    ),
    "cuda_no_driver": Case(
        frames("", ("torch/cuda/__init__.py", "_lazy_init", "torch._C._cuda_init()"))
        + "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
        "installed a driver from http://www.nvidia.com/Download/index.aspx\n",
        "environment",
        False,
        "high",
    ),
    "cuda_deferred": Case(
        "torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: device >= 0 && "
        "device < num_gpus INTERNAL ASSERT FAILED\n",
        "environment",
        False,
        "high",
    ),
    "triton_no_compiler": Case(
        frames("", ("triton/runtime/build.py", "_build", 'raise RuntimeError("Failed to find C compiler. "'))
        + "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.\n",
        "environment",
        False,
        "high",
    ),
    # -- V1's sampler (vllm/v1/sample/) runs in start-up's sampler warm-up (gpu_model_runner `_dummy_sampler_run`,
    # 0.8.5-0.34) and in every serving step: a cut traceback with only its frames places nothing before ready.
    "sampler_only_cut": Case(frames(WORKER, *SAMPLER) + CUT, "unknown", False, "low"),
    # After the ready line the same frames are a serving crash whose exception is not in the log.
    "sampler_only_cut_after_ready": Case(READY + frames(WORKER, *SAMPLER) + CUT, "not_oom_other", False, "low"),
    # Under the step's own frame (execute_model) it is serving, ready line or not.
    "sampler_under_execute_model": Case(
        frames(
            WORKER,
            ("vllm/v1/worker/gpu_worker.py", "execute_model", "output = self.model_runner.execute_model("),
            ("vllm/v1/worker/gpu_model_runner.py", "execute_model", "sampler_output = self.sampler("),
            *SAMPLER,
        )
        + CUT,
        "not_oom_other",
        False,
        "low",
    ),
    # -- V1's stats line (v1/metrics/loggers.py) hard-wrapped at a fixed width, each physical line under docker's
    # timestamp: the rest of the line, with no log header, still shows the cache full with requests waiting.
    "wrapped_stats_pressure": Case(
        READY
        + "".join(
            f"2025-10-15T00:0{i}:58.756533023Z (APIServer pid=1) INFO 10-14 17:0{i}:58 [loggers.py:123] Engine 000: "
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughpu\n"
            f"t: 736.1 tokens/s, Running: 33 reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv}%, "
            "Prefix cache hit rate: 43.5%\n"
            for i, (waiting, kv) in enumerate(((0, 88.5), (18, 99.2), (40, 97.5)), start=2)
        ),
        "cache_pressure",
        False,
        "medium",
    ),
    # The same tails with the cache not full: no pressure, and the server stays healthy.
    "wrapped_stats_calm": Case(
        READY
        + "".join(
            f"2025-10-15T00:0{i}:58.756533023Z (APIServer pid=1) INFO 10-14 17:0{i}:58 [loggers.py:123] Engine 000: "
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughpu\n"
            "t: 736.1 tokens/s, Running: 33 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.0%, Prefix cache hit rate: 43.5%\n"
            for i in range(2, 5)
        ),
        "healthy",
        False,
        "medium",
    ),
    # -- confidence: `high` only where the evidence fixes the phase by itself.
    # Ready and nothing failed: the ready line is a fact, "nothing failed" is what an excerpt left in.
    "ready_no_failure": Case(READY, "healthy", False, "medium"),
    # PyTorch's NCCL watchdog: a collective past its timeout reads the same for a hung rank as for a stalled link.
    "nccl_watchdog_timeout": Case(
        "[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 2 Rank 1] Process group watchdog thread terminated with exception: "
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=4096, "
        "NumelOut=4096, Timeout(ms)=600000) ran for 600053 milliseconds before timing out.\n",
        "network_communication",
        False,
        "medium",
    ),
    # An NCCL error proper stays high.
    "nccl_error": Case(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n",
        "network_communication",
        False,
        "high",
    ),
    # A torch.compile error nothing places, before ready: the compile-and-capture step (phase vocabulary).
    "compile_unplaced": Case(
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: AssertionError\n",
        "cudagraph_capture",
        False,
        "low",
    ),
    # An exception no rule names, with nothing around it: not memory by its wording, placed nowhere.
    "exception_unplaced": Case(
        "ValueError: max() arg is an empty sequence\n",
        "not_oom_other",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_class(name, tmp_path):
    case = CASES[name]
    verdict = verdict_of(name, case, tmp_path)
    assert (verdict.phase, verdict.is_oom, verdict.confidence) == (case.phase, case.is_oom, case.confidence), (
        f"{verdict.summary} / {verdict.confidence_reason}"
    )
