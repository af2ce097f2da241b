"""Classes of session 19 (issue 13). HCCL's own failures as Ascend CANN reports them (its EI error codes, its plog
lines, a collective task the device waited out), gloo's transport refusing to start, DeepEP's CUDA checks on its
expert-parallel buffers and a Ray worker that cannot reach the cluster's GCS are the network; so is a KV connector's
failed handshake with the remote engine, and the frames of a platform plugin's `distributed` package (vllm_ascend's
pyhccl is HCCL's pynccl). A running engine's `collective_rpc` utility call failing ("Invocation of collective_rpc
method failed") is how trainers' weight-sync communicators fail: the network, `low`; any other failure line outranks
it. A native library a package cannot load at import (torchcodec's "Could not load libtorchcodec"), a Gaudi the runtime
cannot acquire, a tokenizer that vLLM or Transformers cannot build, a host compiler run as a subprocess failing and
pydantic v1's "(type=value_error)" line of a refused setting are the environment; vLLM's start-up free-memory check is
read when a paste wraps its line. A graph replayed inside a capture fails the capture; vllm-omni's orchestrator giving
up on its stages is a start-up timeout. A lone OOM line is placed by what PyTorch had freed and cached: near nothing
means no forward pass had run yet (weight loading); freed activations with the device not yet full of the KV pool mean
the profiling pass."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames, verdict_of

CORE = "(EngineCore_DP0 pid=7121) ERROR 01-12 17:24:20 [core.py:769] "
WORKER = "(Worker_TP0 pid=9288) ERROR 01-19 05:52:40 [multiproc_executor.py:962] "
READY = (
    "(APIServer pid=1) INFO 01-12 17:20:02 [launcher.py:46] Route: /v1/chat/completions, Methods: POST\n"
    "INFO:     Application startup complete.\n"
)

CASES = {
    "an_hccl_ei_error_code_is_the_network": Case(
        "[PID: 9288] 2026-01-19-05:52:40.052.351 Allocation_Failure(EI0007): Failed to allocate resource[qp] with "
        "info [aicpu rank:15]. Reason: Memory resources are exhausted.\n",
        "network_communication",
        False,
        "high",
    ),
    "an_hccl_plog_error_line_is_the_network": Case(
        "  [ERROR] HCCL(893240,):2026-08-11-07:03:46.026.970 [exception_handler.cc:23] [904211]HcclBatchGet: "
        "HcclException, what: hccl_one_sided_service.cc:515,BatchGet, Error: hccl special error, ret=1\n",
        "network_communication",
        False,
    ),
    "an_hccl_task_timeout_on_the_device_is_the_network": Case(
        "hccl fftsplus task timeout occurred during task execution,\nstream_id:9, sq_id:9, stuck notify num:1, "
        "timeout=1836s.\n",
        "network_communication",
        False,
    ),
    "gloos_transport_refusing_an_interface_is_the_network": Case(
        f"{WORKER}RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != "
        "nullptr. Unable to find address for: eth0\n",
        "network_communication",
        False,
        "high",
    ),
    "deepeps_cuda_check_is_the_network": Case(
        f"{WORKER}RuntimeError: Failed: CUDA error /tmp/ep_kernels_workspace/DeepEP/csrc/deep_ep.cpp:226 'invalid "
        "resource handle'\n",
        "network_communication",
        False,
    ),
    "a_worker_that_cannot_reach_rays_gcs_is_the_network": Case(
        "Failed to connect to GCS at address 192.160.10.132:41000 within 5 seconds.\n"
        "Failed to get cluster ID from GCS server: Timed out while waiting for GCS to become available.\n",
        "network_communication",
        False,
    ),
    "a_kv_connectors_failed_handshake_is_the_network": Case(
        "ERROR 11-22 06:57:51 [nixl_connector.py:548] Handshake with c00824be-282f-4719-9aeb-120dcb516863 failed\n",
        "network_communication",
        False,
        "high",
    ),
    "a_failed_collective_rpc_call_is_the_weight_sync_link": Case(
        READY + f"{CORE}Invocation of collective_rpc method failed\n{CORE}Traceback (most recent call last):\n[...]\n",
        "network_communication",
        False,
        "low",
    ),
    "a_library_that_cannot_load_is_the_environment": Case(
        'line="RuntimeError: Could not load libtorchcodec. Likely causes:"\n',
        "environment",
        False,
        "high",
    ),
    "a_gaudi_that_cannot_be_acquired_is_the_environment": Case(
        "RuntimeError: synStatus=8 [Device not found] Device acquire failed.\n",
        "environment",
        False,
        "high",
    ),
    "a_fast_tokenizer_that_cannot_be_built_is_the_environment": Case(
        "ValueError: Couldn't instantiate the backend tokenizer from one of:\n(1) a tokenizers library serialization "
        "file,\n",
        "environment",
        False,
        "high",
    ),
    "the_start_free_memory_check_wrapped_after_less_is_still_read": Case(
        "ValueError: Free memory on device cuda:0 (79.12/94.97 GiB) on startup is less\nthan desired GPU memory "
        "utilization (0.95, 90.22 GiB).\n",
        "environment",
        True,
        "high",
    ),
    "vllms_tokenizer_wrapper_is_the_environment": Case(
        "RuntimeError: Failed to load the tokenizer. If the tokenizer is a custom tokenizer not yet available in the "
        "HuggingFace transformers library, consider setting trust_remote_code=True in LLM\n",
        "environment",
        False,
        "high",
    ),
    "a_host_compiler_subprocess_failing_is_the_environment": Case(
        "(EngineCore_DP0 pid=1804) RuntimeError: Worker failed with error 'Command '['/usr/bin/clang++', '-x', "
        "'c++-header', '/root/.triton/cache/precompiled.h', '-o', 'precompiled.h.pch']' returned non-zero exit status "
        "1.'\n",
        "environment",
        False,
        "high",
    ),
    "a_replay_inside_a_capture_fails_the_capture": Case(
        f"{CORE}RuntimeError: Cannot prepare for replay during capturing stage.\n",
        "cudagraph_capture",
        False,
        "high",
    ),
    "vllm_omnis_stage_start_up_timeout_is_a_timeout": Case(
        "WARNING 01-23 02:09:33 [omni.py:326] [Orchestrator] Initialization timeout: 0/1 stages ready. Missing stages: "
        "[0]\n",
        "timeout",
        False,
        "high",
    ),
    "pydantic_v1s_refused_setting_is_the_environment": Case(
        "  Please use Flashinfer backend for models with logits_soft_cap (i.e., Gemma-2). Set Flashinfer backend by "
        "export VLLM_ATTENTION_BACKEND=FLASHINFER. (type=value_error)\n",
        "environment",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session19_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


PYHCCL = (
    ("vllm/v1/executor/multiproc_executor.py", "worker_busy_loop", "output = func(*args, **kwargs)"),
    ("trl/scripts/vllm_serve.py", "init_communicator", "self.pynccl_comm = PyNcclCommunicator(pg, device=self.device)"),
    ("vllm_ascend/distributed/device_communicators/pyhccl.py", "__init__", "assert isinstance(device, torch.device)"),
)


def test_a_platform_plugins_distributed_frames_are_the_network(tmp_path: Path) -> None:
    log = frames(WORKER, *PYHCCL) + f"{WORKER}AssertionError\n"
    verdict = checked_verdict("pyhccl", Case(log, "network_communication", False), tmp_path)
    assert verdict.decided_by == "frames"


def test_a_plugins_kv_connector_frames_are_not_the_network(tmp_path: Path) -> None:
    """A KV connector runs in every step of the requests it moves (vllm/distributed/kv_transfer is excluded the same
    way): a bug there is the step's, not the link's."""
    connector = (
        *PYHCCL[:1],
        ("vllm_ascend/distributed/mooncake_connector.py", "start_load_kv", "meta = self._reqs[req_id]"),
    )
    log = frames(WORKER, *connector) + f"{WORKER}KeyError: 'cmpl-1'\n"
    assert verdict_of("connector", Case(log, "not_oom_other", False), tmp_path).phase != "network_communication"


def test_any_other_failure_line_outranks_a_failed_collective_rpc(tmp_path: Path) -> None:
    oom = (
        f"{CORE}Invocation of collective_rpc method failed\n"
        f"{CORE}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.02 GiB is free.\n"
    )
    verdict = verdict_of("rpc_oom", Case(READY + oom, "serving_prefill", True), tmp_path)
    assert verdict.is_oom and verdict.cause != "E-RPCUTIL"


def oom_line(allocated_gib: float, cached_mib: float, total_gib: float = 23.69, capacity: str = "capacity") -> str:
    """PyTorch 2.1+'s CUDA OOM message (c10/cuda/CUDACachingAllocator.cpp), alone."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 MiB. GPU 0 has a total {capacity} of "
        f"{total_gib} GiB of which 24.56 MiB is free. Process 106008 has {allocated_gib + 0.4:.2f} GiB memory in use. "
        f"Of the allocated memory {allocated_gib} GiB is allocated by PyTorch, and {cached_mib} MiB is reserved by "
        "PyTorch but unallocated.\n"
    )


@pytest.mark.parametrize(
    ("name", "log", "phase"),
    [
        # nothing freed yet: weights loading fill the device
        ("nothing_freed_is_the_weights", oom_line(23.19, 32.44), "weight_loading"),
        (
            "nothing_freed_before_pytorch_2_1_is_the_weights",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB (GPU 0; 14.58 GiB total "
            "capacity; 13.94 GiB already allocated; 17.31 MiB free; 13.94 GiB reserved in total by PyTorch)\n",
            "weight_loading",
        ),
        # activations freed and cached, and the device not yet full of the KV pool: the profiling pass
        (
            "freed_activations_below_the_pool_are_profiling",
            oom_line(19.02, 1351.0, total_gib=21.96),
            "memory_profiling",
        ),
        # PyTorch 2.1 spelled it "total capacty"
        (
            "pytorch_2_1s_spelling_is_read",
            oom_line(19.02, 1351.0, total_gib=21.96, capacity="capacty"),
            "memory_profiling",
        ),
        # activations freed and cached with PyTorch holding the device: the KV pool was allocated (serving)
        ("freed_activations_with_the_pool_are_serving", oom_line(22.83, 163.0, total_gib=23.64), "serving_prefill"),
    ],
)
def test_what_pytorch_had_freed_places_a_lone_oom(name: str, log: str, phase: str, tmp_path: Path) -> None:
    verdict = checked_verdict(name, Case(log, phase, True, "low"), tmp_path)
    assert verdict.decided_by == "context"


def test_graphs_captured_outrank_an_empty_cache(tmp_path: Path) -> None:
    """CUDA graphs' private pools in use mean capture (and the forward passes before it) had run, whatever the cache
    holds: the lone OOM is not read as the weights."""
    log = oom_line(22.83, 20.0, total_gib=23.64).replace(
        "reserved by PyTorch but unallocated.",
        "reserved by PyTorch but unallocated. 1.20 GiB allocated in private pools",
    )
    verdict = verdict_of("captured", Case(log, "serving_prefill", True), tmp_path)
    assert verdict.phase != "weight_loading", verdict.confidence_reason
