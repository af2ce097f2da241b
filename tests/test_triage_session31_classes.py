"""Classes of session 31 (issue 13). A traceback whose innermost frame is torch.distributed's collective or process-group
call (distributed_c10d.py's all_reduce, broadcast, barrier; c10d_logger.py's wrapper around them) failed between the
ranks, whichever vLLM step called the collective (sizing the KV cache with a MIN over ranks, a weight sync). PyTorch's
NCCL watchdog printing "Stack trace of the failed collective" found a collective failed or hung. A program written for
another vLLM release asking one of vLLM's modules for a name it lacks ("module 'vllm.envs' has no attribute
'VLLM_USE_V1'") is the installation, not a start-up step. argparse prints the usage of vLLM's parser before refusing a
command line ("usage: api_server.py [-h] [--host HOST] ..."), and an excerpt may keep only that: the command line. Each
case reads otherwise at the session's starting code."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

SITE = "/usr/local/lib/python3.10/dist-packages"
CASES = {
    "a_collective_inside_kv_sizing_is_the_network": Case(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/vllm/engine/llm_engine.py", line 421, in _initialize_kv_caches\n'
        "    self.model_executor.determine_num_available_blocks())\n"
        f'  File "{SITE}/vllm/executor/uniproc_executor.py", line 137, in determine_num_available_blocks\n'
        "    dist.all_reduce(a_tensor, group=cpu_group, op=dist.ReduceOp.MIN)\n"
        f'  File "{SITE}/torch/distributed/c10d_logger.py", line 83, in wrapper\n'
        "    return func(*args, **kwargs)\n"
        "[...]\n",
        "network_communication",
        False,
        "low",
    ),
    "a_collective_raising_is_the_network": Case(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/vllm/worker/worker.py", line 376, in _init_distributed_environment\n'
        "    torch.distributed.all_reduce(torch.zeros(1).cuda())\n"
        f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 1451, in wrapper\n'
        "    return func(*args, **kwargs)\n"
        f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 1700, in all_reduce\n'
        "    work = group.allreduce([tensor], opts)\n"
        "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
        "store by key '0', but store->get('0') got error: Connection reset by peer\n",
        "network_communication",
        False,
    ),
    "the_watchdogs_stack_of_a_failed_collective_is_the_network": Case(
        "[rank3]:[E508 07:35:59.440171617 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
        f"#0 broadcast from {SITE}/torch/distributed/distributed_c10d.py:2968\n"
        f"#1 wrapper from {SITE}/torch/distributed/c10d_logger.py:83\n",
        "network_communication",
        False,
    ),
    "argparses_usage_of_vllms_parser_is_the_command_line": Case(
        "usage: api_server.py [-h] [--host HOST] [--port PORT] [--uvicorn-log-level "
        "{debug,info,warning,error,critical,trace}]\n"
        "                     [--allow-credentials] [--allowed-origins ALLOWED_ORIGINS]\n",
        "environment",
        False,
    ),
    "a_name_a_vllm_module_lacks_is_the_environment": Case(
        "xinference.core.supervisor 53091 ERROR    Failed to launch replica Qwen3-Embedding-0.6B-0: "
        "[address=0.0.0.0:39985, pid=54926] module 'vllm.envs' has no attribute 'VLLM_USE_V1'\n",
        "environment",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session31_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


def test_an_oom_inside_a_collective_is_not_placed_by_the_frame() -> None:
    """A memory error raised in a collective (NCCL's buffers) is memory: the frame does not make it the network."""
    from oomkit.triage.stack import stack_phase

    stack = [
        f"{SITE}/vllm/v1/worker/gpu_worker.py::determine_available_memory",
        f"{SITE}/torch/distributed/c10d_logger.py::wrapper",
    ]
    assert stack_phase(stack) == "network_communication"
    assert stack_phase(stack, memory=True) != "network_communication"
