"""Classes of session 18 (issue 13). PyTorch's dispatcher finding no kernel of an op for the tensor's backend ("Could
not run '_C::rms_norm' with arguments from the 'CUDA' backend") is an extension built for another platform: the
environment. CPython's call-signature TypeErrors ("got an unexpected keyword argument", "missing 1 required positional
argument", "takes 2 positional arguments but 3 were given") are packages of releases that do not go together: the
environment, with medium confidence (inside one package the same message is a bug). The NVIDIA driver's
NV_ERR_NO_MEMORY (unified-memory GH200/GB10 systems) is an out-of-memory line. A traceback whose innermost frame is
torch.cuda's lazy initialisation is CUDA failing to start (the environment), whatever step first touched the device.
Checkpoint keys of quantization state (bitsandbytes' absmax / quant_map, ModelOpt's *_quantizer.*) with no parameter
are the weights; Ascend CANN's Memory_Allocation_Failure(EL0004) is an OOM; PyTorch's "Cannot copy between CPU and CUDA
tensors during CUDA graph capture" fails the capture. c10d's socket wait expiring ("[c10d] waitForInput: socket ... timed out
after 1800000ms") and HCCL's Get_Socket_Timeout(EI0006) are the rendezvous (network); pydantic's "Value error, ..." line
of a config validator, cut before its bracket, is the settings refused. vLLM's P2P access check subprocess
(custom_all_reduce_utils.py) exiting non-zero is the host."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames, verdict_of

CORE = "(EngineCore_DP0 pid=1122) ERROR 09-19 19:20:03 [core.py:1378] "

CASES = {
    "an_op_with_no_kernel_for_the_backend_is_the_build": Case(
        f"{CORE}NotImplementedError: Could not run '_C::rms_norm' with arguments from the 'CUDA' backend. This could be "
        "because the operator doesn't exist for this backend\n",
        "environment",
        False,
        "high",
    ),
    "an_unexpected_keyword_argument_is_a_release_mismatch": Case(
        "  TypeError: OpenAIServingChat.__init__() got an unexpected keyword argument 'enable_reasoning'\n",
        "environment",
        False,
        "medium",
    ),
    "a_missing_positional_argument_is_a_release_mismatch": Case(
        f"{CORE}TypeError: FusedMoE.select_experts() missing 1 required positional argument: 'indices_type'\n",
        "environment",
        False,
        "medium",
    ),
    "too_many_positional_arguments_is_a_release_mismatch": Case(
        "TypeError: apply_top_k_top_p() takes 3 positional arguments but 4 were given\n",
        "environment",
        False,
        "medium",
    ),
    "a_typeerror_about_types_stays_a_crash": Case(
        f"{CORE}TypeError: 'NoneType' object is not iterable\n",
        "not_oom_other",
        False,
    ),
    "the_drivers_no_memory_status_is_an_oom": Case(
        "(Worker_TP0 pid=7) INFO 03-05 18:03:00 [gpu_model_runner.py:5332] Loading drafter model...\n"
        "kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from "
        "_memdescAllocInternal(pMemDesc) @ mem_desc.c:1359\n",
        "weight_loading",
        True,
    ),
    "a_lone_driver_no_memory_line_is_an_oom_with_a_guessed_phase": Case(
        "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)\n",
        "serving_prefill",
        True,
        "low",
    ),
    "a_bitsandbytes_quant_state_key_is_the_weights": Case(
        "ERROR 12-04 11:26:27 engine.py:366] KeyError: 'layers.10.mlp.down_proj.weight.absmax'\n",
        "weight_loading",
        False,
        "high",
    ),
    "a_modelopt_quantizer_key_is_the_weights": Case(
        "KeyError: 'layers.28.mlp.experts.w2_weight_quantizer._double_scale'\n",
        "weight_loading",
        False,
        "high",
    ),
    "a_layer_name_without_a_parameter_is_not_the_weights": Case(
        f"{CORE}KeyError: 'language_model.model.layers.0.self_attn'\n",
        "not_oom_other",
        False,
    ),
    "ascends_failed_device_allocation_is_an_oom": Case(
        "ERROR 04-09 21:56:46 [diffusion_engine.py:82] [PID: 210907] 2026-04-09-21:56:40.384.694 "
        "Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by GE module.\n",
        "serving_prefill",  # a lone OOM line: the most likely phase, confidence low
        True,
        "low",
    ),
    "c10ds_socket_wait_expiring_is_the_rendezvous": Case(
        "[rank6]:[W806 22:23:09.971726955 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=109, "
        "addr=[::ffff:10.0.0.2]:38930, remote=[::ffff:10.0.0.1]:47904) timed out after 1800000ms\n",
        "network_communication",
        False,
    ),
    "hccls_socket_timeout_is_the_rendezvous": Case(
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out. Reason: 1. The "
        "remote does not initiate a connect request.\n",
        "network_communication",
        False,
    ),
    "a_config_validators_value_error_cut_before_its_bracket": Case(
        "Value error, Unknown quantization method: . Must be one of ['aqlm', 'awq', 'fp8', 'gptq']\n",
        "environment",
        False,
    ),
    "the_p2p_access_check_subprocess_failing_is_the_host": Case(
        "[rank0]: subprocess.CalledProcessError: Command '['/usr/bin/python', '/opt/vllm/vllm/distributed/"
        "device_communicators/custom_all_reduce_utils.py']' returned non-zero exit status 1.\n",
        "environment",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session18_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


LOADER = (
    ("vllm/v1/worker/gpu_model_runner.py", "load_model", "self.model = model_loader.load_model("),
    ("vllm/model_executor/model_loader/base_loader.py", "load_model", "model = initialize_model("),
    ("vllm/model_executor/models/deepseek_v2.py", "__init__", "self.rotary_emb = get_rope("),
    ("vllm/model_executor/layers/rotary_embedding.py", "_compute_inv_freq", "pos_freqs = self.base ** (torch.arange("),
)

CAPTURE_COPY = "RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned.\n"

FRAME_CASES = {
    "a_host_copy_during_capture_fails_the_capture": Case(
        frames(
            "",
            ("vllm/v1/worker/gpu_model_runner.py", "capture_model", "self._capture_cudagraphs("),
            ("vllm/v1/attention/backends/turboquant.py", "build", "query_start_loc.tolist()"),
        )
        + CAPTURE_COPY,
        "cudagraph_capture",
        False,
        "high",
    ),
    "cuda_failing_to_start_under_the_loader_is_the_environment": Case(
        frames("", *LOADER, ("torch/cuda/__init__.py", "_lazy_init", 'raise AssertionError("')) + "[...]\n",
        "environment",
        False,
    ),
    "the_loaders_own_frames_stay_weight_loading": Case(
        frames("", *LOADER) + "[...]\n",
        "weight_loading",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(FRAME_CASES))
def test_session18_frame_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, FRAME_CASES[name], tmp_path)


def test_v0s_api_server_finding_the_engine_dead_is_the_engine_dying(tmp_path: Path) -> None:
    # entrypoints/launcher.py (0.5-0.10) logs it when a request finds the engine dead: a wrapper of the engine's death,
    # whose cause is elsewhere (here nowhere, so the phase stays unknown and says what to collect)
    for line in (
        "CRITICAL 08-30 19:24:28 launcher.py:82] AsyncLLMEngine has failed, terminating server process",
        "CRITICAL 11-21 02:13:05 launcher.py:99] MQLLMEngine is already dead, terminating server process",
    ):
        verdict = verdict_of("launcher", Case(line + "\n", "unknown", False), tmp_path)
        assert (verdict.phase, verdict.cause) == ("unknown", "E-WRAP"), line


def test_an_answered_inference_request_is_the_server_serving(tmp_path: Path) -> None:
    # uvicorn's access log: vLLM's API server answers only once the engine is built, and a 2xx POST is the engine's
    # output; a status poll does not show the engine making progress, and a failed request (session 25) is that
    # request's failure
    served = 'INFO:     10.0.0.5:41234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    assert verdict_of("served", Case(served, "healthy", False), tmp_path).phase == "healthy"
    polled = 'INFO:     127.0.0.1:38440 - "GET /health HTTP/1.1" 200 OK\n'
    assert verdict_of("polled", Case(polled, "unknown", False), tmp_path).phase == "unknown"
    refused = 'INFO:     10.0.0.5:41234 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
    assert verdict_of("refused", Case(refused, "not_oom_other", False), tmp_path).phase == "not_oom_other"
    died = (
        f"{CORE}EngineCore encountered a fatal error.\n"
        'INFO:     10.0.0.5:41234 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    )
    assert verdict_of("died", Case(died, "not_oom_other", False), tmp_path).phase == "not_oom_other"
