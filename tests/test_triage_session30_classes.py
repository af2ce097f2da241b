"""Classes of session 30 (issue 13). uvicorn's "Exception in ASGI application" is a request handler that raised: the
server was serving, whatever start-up step the handler ran again (a LoRA adapter loaded for its first request). The
end of the engine's KV and warm-up step ("init engine (profile, create kv cache, warmup model) took") leaves no
start-up memory step: what fails after it, in an offline run with no API server, fails while serving. PyTorch's NCCL
watchdog reporting a CUDA error, and c10's C++ trace of a failed CUDA check whose text an excerpt cut, are a kernel's
failure, not memory. An exception raised in vllm/envs.py, where the VLLM_* variables are parsed, is the environment,
whichever step first read the variable."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

SITE = "/usr/local/lib/python3.10/dist-packages/vllm"
WARM = (
    "INFO 08-12 08:45:18 [gpu_model_runner.py:2485] Graph capturing finished in 9 secs, took 1.30 GiB\n"
    "INFO 08-12 08:45:18 [core.py:193] init engine (profile, create kv cache, warmup model) took 41.76 seconds\n"
)
C10_TRACE = (
    "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call "
    "first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7fdcec3785e8 in libc10.so)\n"
    "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0x56 (0x7fdb65f6d5a6 in "
    "libtorch_cuda.so)\n"
)
CASES = {
    "a_request_handlers_traceback_is_serving": Case(
        'INFO:     10.0.0.8:53594 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
        "ERROR:    Exception in ASGI application\n"
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/lora/worker_manager.py", line 105, in _load_adapter\n'
        "    lora = self._lora_model_cls.from_local_checkpoint(\n"
        f'  File "{SITE}/lora/models.py", line 221, in from_local_checkpoint\n'
        "    peft_helper = PEFTHelper.from_dict(config)\n"
        f'  File "{SITE}/lora/peft_helper.py", line 80, in from_dict\n'
        "    return cls(**filtered_dict)\n"
        f'  File "{SITE}/lora/peft_helper.py", line 45, in __post_init__\n'
        "    self._validate_features()\n"
        f'  File "{SITE}/lora/peft_helper.py", line 42, in _validate_features\n'
        "[...]\n",
        "not_oom_other",
        False,
        "low",
    ),
    "a_kernel_fault_after_the_engine_was_warm_is_serving": Case(
        WARM + "Warming up...\n" + C10_TRACE,
        "not_oom_other",
        False,
        "low",
    ),
    "an_oom_after_the_engine_was_warm_is_serving": Case(
        WARM + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
        "serving_prefill",
        True,
    ),
    "the_nccl_watchdogs_cuda_error_is_a_kernel_fault": Case(
        "(RayWorkerVllm pid=5304) [E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread terminated with "
        "exception: CUDA error: unknown error\n",
        "not_oom_other",
        False,
    ),
    "a_variable_parsed_in_envs_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/utils.py", line 663, in _get_open_port\n'
        "    port = envs.VLLM_PORT\n"
        f'  File "{SITE}/envs.py", line 172, in get_vllm_port\n'
        "    raise ValueError(\n"
        "ValueError: VLLM_PORT 'tcp://10.0.0.1:6785' appears to be a URI. This may be caused by a Kubernetes service "
        "discovery issue\n",
        "environment",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session30_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
