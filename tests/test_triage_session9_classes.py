"""Classes of session 9 (issue 13), each from vLLM's (or the platform's) source. A server that stops making progress
while serving: the last stats line shows requests running and no token in its interval, and nothing fails
after it (V1's LoggingStatLogger, vllm/v1/metrics/loggers.py, printed every 10 s, only the first interval
without throughput at INFO; V0's metrics.py). And V0 0.6's dump of a failed model execution
(vllm/worker/model_runner_base.py, dump_input_when_exception): the step raised, so a preemption warning
before it is not the story.

Out-of-memory lines of accelerators other than CUDA/ROCm that vLLM runs on (session 9, issue 13): torch_npu's
(vllm-ascend) and XLA's RESOURCE_EXHAUSTED status (TPU, torch_xla and JAX). A lone one is an OOM with the likeliest
phase at low confidence, never `unknown` with is_oom false; XLA's other RESOURCE_EXHAUSTED errors are not memory.
And rdma-core's mlx5 provider reporting a failed work completion: an InfiniBand/RoCE transfer failed (network).
And vllm/multimodal/profiling.py's warning that the profiling sequence is too short for the worst-case multimodal
input: printed once, while the profiling run builds its dummy data, so an OOM right after it is memory profiling."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

READY = "(APIServer pid=7) INFO 11-04 12:20:01 [api_server.py:1520] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
V1 = "(APIServer pid=7) INFO 11-04 12:{mm}:52 [loggers.py:127] Engine 000: Avg prompt throughput: {p} tokens/s, "
V1 += "Avg generation throughput: {g} tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 21.0%, "
V1 += "Prefix cache hit rate: 1.4%\n"
V0 = (
    "INFO 08-21 07:31:28 metrics.py:406] Avg prompt throughput: {p} tokens/s, Avg generation throughput: {g} tokens/s, "
)
V0 += "Running: {r} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.4%, CPU KV cache usage: 0.0%.\n"


def v1(mm: int, p: str, g: str, r: int) -> str:
    return V1.format(mm=mm, p=p, g=g, r=r)


V0_ADDED = "INFO 10-11 06:51:31 engine.py:292] Added request chat-29cc.\n"
V0_PREEMPT = (
    "WARNING 10-11 06:51:31 scheduler.py:1493] Sequence group chat-55b8 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1\n"
)
V0_DUMP = (
    "INFO 10-11 06:51:31 model_runner_base.py:120] Writing input of failed execution to "
    "/tmp/err_execute_model_input_20241011-065131.pkl...\n"
)
CASES = {
    "npu_oom": Case(
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity)\n",
        "serving_prefill",
        True,
        "low",
    ),
    "xla_device_buffer": Case(
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to "
        "allocate 1.50G. That was not possible. There are 1.02G free.\n",
        "serving_prefill",
        True,
        "low",
    ),
    "xla_program_load": Case(
        "RESOURCE_EXHAUSTED: Error loading program 'jit__multi_slice': Attempting to reserve 6.14G at the bottom "
        "of memory. That was not possible.\n",
        "serving_prefill",
        True,
        "low",
    ),
    "mlx5_completion_error": Case(
        "(LLMRayActor pid=90621, ip=10.0.0.2) mlx5: host-a: got completion with error:\n"
        "(LLMRayActor pid=90621, ip=10.0.0.2) 00000000 00000000 00000000 00000000\n",
        "network_communication",
        False,
    ),
    "oom_after_mm_profiling_warning": Case(
        "WARNING 04-27 16:27:59 [profiling.py:245] The sequence length used for profiling (max_num_batched_tokens / "
        "max_num_seqs = 20000) is too short to hold the multi-modal embeddings in the worst case (98304 tokens in "
        "total, out of which {'image': 16384} are reserved for multi-modal embeddings).\n"
        "ERROR 04-27 16:28:02 [engine.py:448] CUDA out of memory. Tried to allocate 800.00 MiB. GPU 0 has a total "
        "capacity of 15.56 GiB of which 442.62 MiB is free. Of the allocated memory 14.88 GiB is allocated by "
        "PyTorch\n",
        "memory_profiling",
        True,
        "medium",
    ),
    # gRPC's RESOURCE_EXHAUSTED (a message over the size limit) is not device memory.
    "grpc_message_size": Case(
        'grpc._channel._InactiveRpcError: status = StatusCode.RESOURCE_EXHAUSTED details = "Received message '
        'larger than max (5242880 vs. 4194304)"\n',
        "unknown",
        False,
    ),
    "v0_failed_execution_after_preemption": Case(
        V0_ADDED + V0_PREEMPT + V0_DUMP + "[...]\n", "not_oom_other", False, "low"
    ),
    "v1_stalled_with_requests_running": Case(
        READY + v1(26, "1759.2", "1039.3", 16) + v1(27, "0.0", "0.0", 16), "timeout", False, "low"
    ),
    "v0_stalled_one_request": Case(
        "INFO 08-21 07:31:22 async_llm_engine.py:174] Added request chat-0e.\n" + V0.format(p="0.0", g="0.0", r=1),
        "timeout",
        False,
        "low",
    ),
    # Negatives: an idle server (nothing running) and a stall that recovered are not hangs.
    "v1_idle_after_serving": Case(READY + v1(26, "1759.2", "1039.3", 16) + v1(27, "0.0", "0.0", 0), "healthy", False),
    "v1_slow_interval_then_progress": Case(
        READY + v1(26, "0.0", "0.0", 4) + v1(27, "12.0", "80.5", 4), "healthy", False
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session9_class(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    verdict = checked_verdict(name, case, tmp_path)
    if case.phase == "timeout":
        assert "0 tokens/s" in verdict.summary and any("Running:" in e.text for e in verdict.evidence)
