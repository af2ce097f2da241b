"""Classes of session 16 (issue 13). Sleep mode: vLLM's CuMemAllocator extension prints its driver errors ("CUDA
Error: out of memory at .../cumem_allocator.cpp:62") before Python sees them; the pools it maps are the weights and
the KV cache, at start and again at wake_up, so alone such a line is the KV allocation (low), and a traceback through
`wake_up` places any failure there; sleep mode's reports ("Sleep mode freed ...", "It took N seconds to fall asleep")
come only from a built engine, so they mark it ready. An OOM line that nothing but markers placed, followed by a
traceback of its own process, is placed by those frames (not by another process's). Ray's raylet reporting a worker
"died or was killed ... by an unexpected system error" is a process that vanished. A log that ends in NCCL's set-up
chatter (NCCL_DEBUG=INFO: "NCCL INFO Bootstrap ...", "Channel 00/02") with nothing after it hangs there (timeout); a
later marker drops the wait, and teardown lines ("Destroy COMPLETE") are no set-up. The environment also: PyTorch
asking for a device's properties with no GPU visible ("device >= 0 && device < num_gpus INTERNAL ASSERT FAILED"), and
cuBLAS refusing a call its build or the GPU does not support (CUBLAS_STATUS_INVALID_VALUE, NOT_SUPPORTED,
ARCH_MISMATCH). V0's scheduler ignoring a prompt that needs more blocks than the
whole pool ("exceeds the capacity of block_manager") is a KV cache too small for one request, not pressure. The
multimodal processor failing on its dummy inputs ("Failed to apply XProcessor on data=") kills start-up's memory
profiling; after the ready line it is one request's input. SIGBUS ("Fatal Python error: Bus error") is /dev/shm run
out under the collectives, or a cut checkpoint when the loader's frames hold it. glog/Abseil's C++ prefix ("E1216
02:12:49.624646 179 model.py:248] msg", as Triton, XLA, NIXL print it) is peeled like vLLM's own header, and Triton's
Python backend reports a model's failed initialize() as "Failed to initialize Python stub: TypeError: ...": read as the
exception line it carries."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

from oomkit.logs.line import parse_line

READY = "INFO 06-16 09:49:10 [launcher.py:29] Route: /v1/chat/completions, Methods: POST\nINFO:     Application startup complete.\n"
WAKE_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 303, in <module>\n'
    "    trainer.train()\n"
    '  File "/venv/lib/python3.12/site-packages/vllm/entrypoints/llm.py", line 1572, in wake_up\n'
    "    self.llm_engine.wake_up(tags)\n"
    '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/llm_engine.py", line 281, in wake_up\n'
    "    self.engine_core.wake_up(tags)\n"
)
LOAD_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.12/site-packages/vllm/worker/model_runner.py", line 1012, in load_model\n'
    "    self.model = get_model(vllm_config=self.vllm_config)\n"
    '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/model_loader/weight_utils.py", line 420, '
    "in safetensors_weights_iterator\n"
    "    with safe_open(st_file, framework='pt') as f:\n"
)
CAPTURE_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2100, in capture_model\n'
    "    self._dummy_run(num_tokens)\n"
)
MM_FAIL = (
    "RuntimeError: Failed to apply UltravoxProcessor on data={'text': '<|audio|>', 'audios': [array([0., 0., 0., "
    "..., 0., 0., 0.])]} with kwargs={'sampling_rate': 16000}\n"
)
TRITON_STUB = (
    'I1216 02:12:49.624943 179 pb_stub.cc:388] "Failed to initialize Python stub: TypeError: '
    "build_async_engine_client_from_engine_args() got an unexpected keyword argument 'stat_loggers'\\n\\nAt:\\n  "
    '/usr/lib/python3.12/contextlib.py(105): __init__\\n"\n'
)

CASES = {
    "sleep_mode_allocator_oom_alone_is_the_kv_cache": Case(
        "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:56\n"
        "CUDA Error: invalid argument at /workspace/csrc/cumem_allocator.cpp:57\n",
        "kv_cache_allocation",
        True,
        "low",
    ),
    "oom_line_then_its_own_wake_up_traceback": Case(
        "INFO 09-10 12:12:34 [gpu_worker.py:115] Sleep mode freed 9.19 GiB memory, 7.66 GiB memory is still in use.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n" + WAKE_FRAMES,
        "kv_cache_allocation",
        True,
    ),
    "sleep_and_wake_up_lines_mean_the_engine_was_built": Case(
        "INFO 04-23 16:21:37 [worker.py:145] Sleep mode freed 19.51 GiB memory, 26.31 GiB memory is still in use.\n"
        "INFO 04-23 16:21:37 [executor_base.py:188] It took 0.498879 seconds to fall asleep.\n"
        "INFO 04-23 16:22:01 [executor_base.py:219] It took 1.462464 seconds to wake up.\n",
        "healthy",
        False,
    ),
    "oom_after_sleep_placed_by_its_wake_up_traceback_not_the_marker": Case(
        "INFO 09-10 12:12:34 [executor_base.py:188] It took 0.498879 seconds to fall asleep.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n" + WAKE_FRAMES,
        "kv_cache_allocation",
        True,
    ),
    "sleep_allocator_oom_after_the_server_was_up_is_its_wake_up": Case(
        READY + "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n",
        "kv_cache_allocation",
        True,
        "low",
    ),
    "ray_worker_killed_by_a_system_error_vanished": Case(
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
        "the problem, check the logs for the dead worker.\n",
        "unknown",
        False,
    ),
    "log_ends_in_nccl_communicator_set_up": Case(
        "INFO 09-03 02:15:42 pynccl.py:63] vLLM is using nccl==2.21.5\n"
        "osprey1:1927386:1927386 [0] NCCL INFO Bootstrap : Using eno1:128.174.136.27<0>\n"
        "osprey1:1927386:1927386 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n",
        "timeout",
        False,
        "medium",
    ),
    "nccl_set_up_then_weights_load_is_no_wait": Case(
        "osprey1:1927386:1927386 [0] NCCL INFO Channel 00/02 :    0   1\n"
        "INFO 09-03 02:16:42 [default_loader.py:308] Loading weights took 12.30 seconds\n",
        "unknown",
        False,
    ),
    "nccl_teardown_at_the_end_is_no_wait": Case(
        READY + "host:1:1 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE\n",
        "healthy",
        False,
    ),
    "pytorch_with_no_gpu_visible": Case(
        'RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "../aten/src/ATen/cuda/CUDAContext.cpp"'
        ":50, please report a bug to PyTorch. device=, num_gpus=\n",
        "environment",
        False,
        "high",
    ),
    "cublas_refusing_the_call_is_its_build": Case(
        "(EngineCore_DP0 pid=2411846) RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling "
        "`cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c)`\n",
        "environment",
        False,
        "high",
    ),
    "cut_wake_up_traceback_is_the_kv_cache": Case(
        "2025-09-16 10:20:03,241\tERROR worker.py:421 -- Unhandled error: ray::VllmGenerationWorker.wake_up()\n"
        + WAKE_FRAMES,
        "kv_cache_allocation",
        False,
    ),
    "oom_line_then_another_process_traceback_is_not_placed_by_it": Case(
        "(VllmWorker rank=1 pid=2978) ERROR 03-19 07:27:53 [multiproc_executor.py:375] torch.OutOfMemoryError: CUDA "
        "out of memory. Tried to allocate 20.00 MiB.\n" + CAPTURE_FRAMES,
        "serving_prefill",
        True,
        "low",
    ),
    "v0_prompt_larger_than_the_whole_pool": Case(
        "WARNING 12-19 10:21:05 scheduler.py:161] Input prompt (1217 tokens) is too long and exceeds the capacity of "
        "block_manager\n",
        "kv_cache_allocation",
        False,
        "high",
    ),
    "v0_preemption_is_still_pressure": Case(
        "WARNING 05-04 08:14:07 scheduler.py:1089] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space.\n",
        "cache_pressure",
        False,
    ),
    "multimodal_processor_fails_on_the_dummy_inputs": Case(MM_FAIL, "memory_profiling", False, "high"),
    "multimodal_processor_failure_after_ready_is_one_request": Case(READY + MM_FAIL, "not_oom_other", False, "medium"),
    "sigbus_in_a_worker_is_shared_memory": Case(
        "(RayWorker pid=3346) Fatal Python error: Bus error\n", "network_communication", False, "high"
    ),
    "sigbus_in_the_loader_frames_is_a_cut_checkpoint": Case(
        LOAD_FRAMES + "Fatal Python error: Bus error\n", "weight_loading", False, "medium"
    ),
    "segfault_stays_a_crash": Case("Fatal Python error: Segmentation fault\n", "not_oom_other", False, "high"),
    # session 18: E-SIGNATURE names the TypeError the stub carries (medium; it was placed by its wording, low)
    "triton_python_stub_signature_mismatch_is_the_environment": Case(TRITON_STUB, "environment", False, "medium"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session16_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


def test_glog_prefix_is_peeled_with_its_level_and_source() -> None:
    rec = parse_line('E1216 02:12:49.624646 179 model.py:248] "[vllm] Failed to start engine: NoneType: None\\n"')
    assert (rec.level, rec.src, rec.msg) == ("ERROR", "model.py:248", "[vllm] Failed to start engine: NoneType: None")
    rec = parse_line("W0605 10:01:02.000001  12 tpu_pjrt_client.cc:77] slow host")
    assert (rec.level, rec.src, rec.msg) == ("WARNING", "tpu_pjrt_client.cc:77", "slow host")
