"""Classes of session 32 (issue 13). V0's wrapper line ("Exception in worker VllmWorkerProcess while processing method
determine_num_available_blocks.") names the method the worker ran, which placed the failure when its line was read; the
traceback printed after it, even cut before its exception, now places it (a collective inside the profile run is the
network). cupy's NCCL store refusing ("TCPStore is not available", vLLM 0.3's graph all-reduce) is the network. A
traceback through a tool-call or reasoning parser (which read a request's generated text) is serving, while their
managers' look-up of a named parser runs when the configuration is built. A check that vLLM's source raises only in a
quantization or fused-MoE method's constructor is model building (weight loading), only in its `apply` the profile
run's first forward. Each case reads otherwise at the session's starting code."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

SITE = "/usr/local/lib/python3.10/dist-packages"
WORKER = "(VllmWorkerProcess pid=3184) ERROR 12-10 11:33:24 multiproc_worker_utils.py:229] "
CASES = {
    "a_collective_cut_after_the_wrappers_method_is_the_network": Case(
        f"{WORKER}Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.\n"
        f"{WORKER}Traceback (most recent call last):\n"
        f'{WORKER}  File "{SITE}/vllm/worker/worker.py", line 229, in determine_num_available_blocks\n'
        f"{WORKER}    self.model_runner.profile_run()\n"
        f'{WORKER}  File "{SITE}/vllm/distributed/parallel_state.py", line 375, in _all_reduce_in_place\n'
        f"{WORKER}    torch.distributed.all_reduce(input_, group=self.device_group)\n"
        f'{WORKER}  File "{SITE}/torch/distributed/c10d_logger.py", line 79, in wrapper\n'
        f"{WORKER}    return func(*args, **kwargs)\n",
        "network_communication",
        False,
        "low",
    ),
    "cupys_store_refusing_is_the_network": Case(
        f'  File "{SITE}/cupyx/distributed/_store.py", line 142, in _send_recv\n'
        "    raise RuntimeError('TCPStore is not available')\n"
        "RuntimeError: TCPStore is not available\n",
        "network_communication",
        False,
    ),
    "a_tool_parsers_cut_traceback_is_serving": Case(
        " [glm4_moe_tool_parser.py:123] Failed to extract tool call spec\n"
        "[glm4_moe_tool_parser.py:123] Traceback (most recent call last):\n"
        f' [glm4_moe_tool_parser.py:123]   File "{SITE}/vllm/tool_parsers/glm4_moe_tool_parser.py", line 104, in '
        "extract_tool_calls\n"
        " [glm4_moe_tool_parser.py:123]     pairs = self.func_arg_regex.findall(tc_args)\n",
        "not_oom_other",
        False,
    ),
    # vLLM's source raises these only in a quantization or fused-MoE method's constructor
    # (CompressedTensorsWNA16MoEMethod.__init__: made while the layer is built) or its `apply` (AWQMarlinMoEMethod.apply
    # and its kin: the layer's forward, first run by the profile run); a log that is only that line is placed there
    "a_quantization_methods_constructor_check_is_weight_loading": Case(
        "AssertionError: Only symmetric quantization is supported for MoE\n", "weight_loading", False, "low"
    ),
    "a_quantization_methods_apply_check_is_the_profile_run": Case(
        "AssertionError: Only SiLU activation is supported.\n", "memory_profiling", False, "low"
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session32_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


def test_a_parser_managers_look_up_is_not_serving() -> None:
    """The configuration looks a named reasoning or tool parser up while it is built: the manager's frame is no
    serving frame, a parser's own frame is."""
    from oomkit.triage.frames import is_serving_frame

    assert not is_serving_frame(f"{SITE}/vllm/reasoning/abs_reasoning_parsers.py::get_reasoning_parser")
    assert not is_serving_frame(f"{SITE}/vllm/tool_parsers/abstract_tool_parser.py::get_tool_parser")
    assert is_serving_frame(f"{SITE}/vllm/reasoning/deepseek_r1_reasoning_parser.py::extract_reasoning")
    assert is_serving_frame(f"{SITE}/vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py::extract_tool_calls")
