"""Classes of session 30 (issue 13). uvicorn's "Exception in ASGI application" is a request handler that raised: the
server was serving, whatever start-up step the handler ran again (a LoRA adapter loaded for its first request). The
end of the engine's KV and warm-up step ("init engine (profile, create kv cache, warmup model) took") leaves no
start-up memory step: what fails after it, in an offline run with no API server, fails while serving. PyTorch's NCCL
watchdog reporting a CUDA error, and c10's C++ trace of a failed CUDA check whose text an excerpt cut, are a kernel's
failure, not memory. An exception raised in vllm/envs.py, where the VLLM_* variables are parsed, is the environment,
whichever step first read the variable; so is a traceback cut inside one of vLLM's modules that a function imports (the
CLI importing its sub-commands), though not inside the body of the main module runpy runs. The API server's list of
its routes ("Route: /health, Methods: GET") prints only once the engine is built: a ready server."""

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
    "a_vllm_module_the_cli_imports_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 10, in <module>\n'
        "    sys.exit(main())\n"
        f'  File "{SITE}/entrypoints/cli/main.py", line 18, in main\n'
        "    import vllm.entrypoints.cli.benchmark.main\n"
        f'  File "{SITE}/entrypoints/cli/benchmark/main.py", line 10, in <module>\n'
        "    from vllm.entrypoints.serve.utils.api_utils import VLLM_SUBCMD_PARSER_EPILOG\n"
        "[...]\n",
        "environment",
        False,
        "low",
    ),
    "the_servers_route_list_is_a_ready_server": Case(
        "(APIServer pid=1) INFO 02-06 09:17:20 [launcher.py:47] Route: /health, Methods: GET\n"
        "(APIServer pid=1) INFO 02-06 09:17:20 [launcher.py:47] Route: /v1/models, Methods: GET\n"
        "(APIServer pid=1) INFO 02-06 09:17:20 [launcher.py:47] Route: /invocations, Methods: POST\n",
        "healthy",
        False,
        "medium",
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


def test_a_main_module_runpy_runs_is_not_an_import() -> None:
    """The server's main module runs its whole body under runpy: a traceback cut there is not an import failure."""
    from oomkit.triage.stack import imported_in_a_function

    runpy = ["/usr/lib/python3.12/runpy.py::_run_module_as_main", "/usr/lib/python3.12/runpy.py::_run_code"]
    server = f"{SITE}/entrypoints/openai/api_server.py::<module>"
    assert not imported_in_a_function([*runpy, server])
    assert imported_in_a_function([f"{SITE}/entrypoints/cli/main.py::main", server])
