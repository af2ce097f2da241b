"""Serving-time classes of session 9 (issue 13), from vLLM's source. A server that stops making progress
while serving: the last stats line shows requests running and no token in its interval, and nothing fails
after it (V1's LoggingStatLogger, vllm/v1/metrics/loggers.py, printed every 10 s, only the first interval
without throughput at INFO; V0's metrics.py). And V0 0.6's dump of a failed model execution
(vllm/worker/model_runner_base.py, dump_input_when_exception): the step raised, so a preemption warning
before it is not the story."""

from pathlib import Path

import pytest
from _triage_synth import Case, verdict_of

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
def test_serving_stall(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    verdict = verdict_of(name, case, tmp_path)
    assert (verdict.phase, verdict.is_oom) == (case.phase, case.is_oom)
    if case.confidence:
        assert verdict.confidence == case.confidence
    if case.phase == "timeout":
        assert "0 tokens/s" in verdict.summary and any("Running:" in e.text for e in verdict.evidence)
