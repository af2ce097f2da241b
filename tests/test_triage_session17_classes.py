"""Classes of session 17 (issue 13). Installing vLLM is the environment: pip's resolver finding no build for this
Python or platform ("Could not find a version that satisfies the requirement"), a build backend failing
("subprocess-exited-with-error", "Failed building wheel for"), uv's "Failed to build `vllm`", CMake's "Configuring
incomplete". V1's multiproc executor quotes a worker's exception in its wrapper ("Worker failed with error '...'"):
that line is the exception, so a refusal quoted there is the settings refusing the launch. A rendezvous or IPC port
already taken (c10d's TCPStore "server socket has failed to listen", pyzmq's "ZMQError: Address already in use") is the
communication set-up; the API server's own port stays the environment. vLLM's DEBUG platform probes ("Exception
happens when checking CUDA platform: NVML Shared Library Not Found" on a host of another platform) are no failure. A
CUDA kernel's assert in CUDA's quoting ("Assertion `index < size` failed.") is a device-side assert even where the
block/thread coordinates are garbled. The model registries' refusals: tpu-inference's "Model architectures [...] not
registered in tpu-inference", vLLM 0.7-0.9's "has no vLLM implementation and the Transformers implementation is not
compatible with vLLM". PyTorch's caching allocator warning "memory allocation failed with OOM on device N" is an OOM;
Ray's executor finding no GPU on the driver's node is the cluster's layout (environment),
not the placement of workers. The NVIDIA driver's Xid 13/31/43 (a fault a kernel caused) and its "MMU Fault: ENGINE" line are a kernel fault.
AutoWeightsLoader's "There is no module or parameter named 'x'" is the weights, also when the
model class's name is wrapped onto the next line. And the generator now mines `assert cond, msg` (see
test_triage_knowledge.py)."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames

CORE = "(EngineCore_DP0 pid=1122) ERROR 09-19 19:20:03 [core.py:1378] "

CASES = {
    "pip_finds_no_build_for_this_python": Case(
        "      Collecting setuptools>=49.4.0\n"
        "      ERROR: Could not find a version that satisfies the requirement torch==2.1.2 (from versions: 2.2.0)\n"
        "      ERROR: No matching distribution found for torch==2.1.2\n",
        "environment",
        False,
        "high",
    ),
    "a_source_build_that_fails_in_cmake": Case(
        "      -- Configuring incomplete, errors occurred!\n"
        "      error: subprocess-exited-with-error\n"
        "  ERROR: Failed building wheel for vllm\n",
        "environment",
        False,
        "high",
    ),
    "uv_failing_to_build_vllm": Case(
        "  × Failed to build `vllm==0.8.5`\n  ├─▶ The build backend returned an error\n",
        "environment",
        False,
        "high",
    ),
    "a_refusal_quoted_by_the_worker_wrapper_is_the_environment": Case(
        f"{CORE}RuntimeError: Worker failed with error 'MLA kv_data_type torch.uint8 is not supported. Supported "
        "dtypes: [torch.float16, torch.bfloat16].', please check the stack trace above for the root cause\n",
        "environment",
        False,
        "low",
    ),
    "a_wrapper_that_quotes_nothing_is_still_unknown": Case(
        f"{CORE}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}\n",
        "unknown",
        False,
    ),
    "tcpstore_port_in_use_is_communication_set_up": Case(
        "OSError: [Errno 98] Address already in use\n"
        "RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, "
        "name: EADDRINUSE, message: address already in use\n",
        "network_communication",
        False,
        "high",
    ),
    "zmq_port_in_use_is_communication_set_up": Case(
        "(ApiServer_0 pid=77) zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.1:39381')\n",
        "network_communication",
        False,
        "high",
    ),
    "the_api_servers_own_port_in_use_stays_the_environment": Case(
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use\n",
        "environment",
        False,
        "high",
    ),
    "ray_driver_node_without_a_gpu_is_the_clusters_layout": Case(
        "ValueError: Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or "
        "running the driver on a GPU node.\n",
        "environment",
        False,
        "high",
    ),
    "ray_autoscaler_with_no_node_for_the_bundle_stays_placement": Case(
        "(autoscaler +13s) Error: No available node types can fulfill resource request {'GPU': 1.0}. Add suitable node "
        "types to this cluster to resolve this issue.\n",
        "network_communication",
        False,
        "high",
    ),
    "debug_platform_probes_are_no_failure": Case(
        "DEBUG 01-06 04:18:56 [platforms/__init__.py:55] TPU platform is not available because: No module named 'libtpu'\n"
        "DEBUG 01-06 04:18:56 [platforms/__init__.py:88] Exception happens when checking CUDA platform: NVML Shared "
        "Library Not Found\n"
        "INFO 01-06 04:18:56 [__init__.py:239] Automatically detected platform rocm.\n",
        "unknown",
        False,
    ),
    "a_kernel_assert_with_garbled_coordinates_is_a_device_assert": Case(
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu,0:111], thread: [46: operator(): block: [9,0,0,0,0] "
        'Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n',
        "not_oom_other",
        False,
        "high",
    ),
    "tpu_inference_refusing_an_architecture": Case(
        "UnsupportedArchitectureError: Model architectures ['GraniteMoeHybridForCausalLM'] not registered in "
        "tpu-inference.\n",
        "environment",
        False,
        "high",
    ),
    "no_vllm_implementation_and_no_compatible_transformers_one": Case(
        "ValueError: MyModelForCausalLM has no vLLM implementation and the Transformers implementation is not "
        "compatible with vLLM. Try setting VLLM_USE_V1=0.\n",
        "environment",
        False,
        "high",
    ),
    "caching_allocator_oom_warning_is_an_oom": Case(
        "[rank0]:[W830 12:05:56.439888962 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 0 "
        "while trying to allocate 272629760 bytes (free: 148373504, total: 85017624576)\n",
        "serving_prefill",  # a lone OOM line: the most likely phase, confidence low
        True,
        "low",
    ),
    "driver_xid_page_fault_is_a_kernel_fault": Case(
        "NVRM: Xid (PCI:0000:01:00): 31, pid=<enginecore>, name=VLLM::EngineCor, channel 0x00000008, intr 00000000.\n"
        "MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_0 faulted @ 0xd_2892f000.\n",
        "not_oom_other",
        False,
    ),
    "no_module_or_parameter_with_the_class_on_the_next_line": Case(
        "    ValueError: There is no module or parameter named 'model' in\n"
        "    Qwen3_8FlashNextForConditionalGeneration\n",
        "weight_loading",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session17_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


def _cut(*calls: tuple[str, str]) -> str:
    """A traceback the excerpt cut before its exception line (the shared `frames` builder, no log header)."""
    return frames("", *((path, func, "call()") for path, func in calls))


FRAME_CASES = {
    # building the engine's configuration from the command line: the settings
    "cut_in_the_argument_parser": Case(
        _cut(("vllm/entrypoints/openai/api_server.py", "run_server"), ("vllm/engine/arg_utils.py", "from_cli_args")),
        "environment",
        False,
    ),
    "cut_in_a_config_class": Case(
        _cut(("vllm/engine/arg_utils.py", "create_engine_config"), ("vllm/config/model.py", "__post_init__")),
        "environment",
        False,
    ),
    # Triton compiling its driver's launcher with the host compiler: the toolchain
    "cut_in_tritons_driver_build": Case(
        _cut(("triton/runtime/jit.py", "run"), ("triton/backends/nvidia/driver.py", "compile_module_from_src")),
        "environment",
        False,
    ),
    # a guard: the loader's frames still place a cut traceback in weight loading
    "cut_in_the_loader_stays_weight_loading": Case(
        _cut(
            ("vllm/engine/arg_utils.py", "create_engine_config"),
            ("vllm/model_executor/model_loader/loader.py", "load_model"),
        ),
        "weight_loading",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(FRAME_CASES))
def test_session17_frame_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, FRAME_CASES[name], tmp_path)
