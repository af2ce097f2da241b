"""Classes of session 26 (issue 13). The layers `--cpu-offload-gb` keeps on the host need pinned memory, which vLLM
reads through a CUDA view whose assertion ("CPU tensor must be pinned") stops the model while its layers are built:
weight loading. A container's uid with no passwd entry (CPython's "getpwuid(): uid not found", raised where
torch.compile, Triton or vLLM name their cache directories after the user), CUDA_VISIBLE_DEVICES holding device UUIDs
(MIG slices) that vLLM's platform layer reads as indices, a CUDA toolkit without its libdevice bitcode, a kernel
package of another release (FlashInfer's cubin check) or for another chip (Ascend's socversion check) are the
environment. The Run:ai model streamer (`--load-format runai_streamer`) is weight loading. Any line of V1's
failed-step dump (the logger's location, dump_input.py, in vLLM's header), even a stretch without the dump's first
line, is a model-execution step that raised: the engine was serving. V0's API server logging that it still waits for
its engine's output (E-MQWAIT, every poll that runs out) is a start-up stall when the log ends in it before the ready
line; after the ready line it is an idle server, and a failure or a traceback after it is what ended the wait. Slurm
killing a job step's task for its memory limit, and the kernel's OOM-kill report without its first line ("anon-rss: N
kB", CONSTRAINT_MEMCG), are the host's memory running out (placed, with nothing else, at the likeliest phase). A name
the release does not know, in its checks' words ("Unknown speculative decoding method: ..."), is a refusal of the
launch's settings when nothing places it; an unknown error is not. A traceback cut inside `with torch.cuda.graph(`
(V1's CUDAGraphWrapper, V0's CUDAGraphRunner) is graph capture, the only step that captures, as is a traceback cut in
torch.cuda.graph's capture methods (not CUDAGraph.replay, which serving runs) and Ascend's graph capture failing
(torch_npu's AclmdlRICaptureBegin, the runtime's capture-stream errors); the body of Dynamo's graph-break message
("Explanation: Dynamo ...", "Developer debug context:") is torch.compile, which the vocabulary files with graph
capture; an image without ldconfig, which Triton runs to find libcuda, is the environment."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

W = "(Worker_TP0 pid=1377089) ERROR 03-12 11:38:40 [multiproc_executor.py:932] "
MQWAIT = "DEBUG 05-31 01:41:57 client.py:191] Waiting for output from MQLLMEngine.\n"

CASES = {
    "cpu_offloaded_layers_without_pinned_memory_stop_weight_loading": Case(
        "AssertionError: CPU tensor must be pinned\n",
        "weight_loading",
        False,
    ),
    "a_uid_without_a_passwd_entry_is_the_environment": Case(
        "(EngineCore_DP0 pid=88) ERROR 06-02 10:11:12 [core.py:708] KeyError: 'getpwuid(): uid not found: 1000'\n",
        "environment",
        False,
    ),
    "device_uuids_in_cuda_visible_devices_are_the_environment": Case(
        "ValueError: invalid literal for int() with base 10: 'MIG-fe59bfcd-3946-5d58-a00e-183ee397373b'\n",
        "environment",
        False,
    ),
    "a_cuda_toolkit_without_libdevice_is_the_environment": Case(
        "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/nvvm/libdevice/libdevice.10.bc'\n",
        "environment",
        False,
    ),
    "a_slurm_job_steps_oom_kill_is_host_memory": Case(
        "slurmstepd: error: Detected 1 oom_kill event in StepId=26161866.0. Some of the step tasks have been OOM "
        "Killed.\nsrun: error: node-01: task 0: Out Of Memory\n",
        "weight_loading",
        True,
        "low",
    ),
    "the_kernels_oom_kill_report_in_a_memory_cgroup_is_host_memory": Case(
        "Memory cgroup out of memory: Killed process (VLLM::Worker_TP)\n"
        "  total-vm: 824088588 kB, anon-rss: 3131928 kB, file-rss: 74760 kB, shmem-rss: 150143716 kB\n"
        "  constraint: CONSTRAINT_MEMCG\n",
        "weight_loading",
        True,
        "low",
    ),
    "a_kernel_package_of_another_release_is_the_environment": Case(
        "flashinfer-cubin version (0.6.13) does not match flashinfer version (0.6.14). Please install "
        "the same version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.\n",
        "environment",
        False,
    ),
    "an_ascend_kernel_package_for_another_soc_is_the_environment": Case(
        "[ERROR] the socversion Ascend910B1 of bin package does not match the current device socverison "
        "Ascend310P3. Please modify default socversion in run.sh\n",
        "environment",
        False,
    ),
    "a_stretch_of_v1s_failed_step_dump_is_a_crash_while_serving": Case(
        "(EngineCore_DP0 pid=142) ERROR 11-01 10:54:19 [dump_input.py:79]         1., 1., 1., 1., 1., 1.,\n"
        "(EngineCore_DP0 pid=142) ERROR 11-01 10:54:19 [dump_input.py:79]        dtype=torch.bfloat16), "
        "field=MultiModalBatchedField())}, modality='image')\n",
        "not_oom_other",
        False,
        "low",
    ),
    "the_dump_after_a_start_up_cut_at_the_kv_cache_is_serving": Case(
        "(EngineCore_DP0 pid=1025) INFO 11-28 12:33:29 [gpu_worker.py:359] Available KV cache memory: 59.82 GiB\n"
        "[...]\n"
        "(EngineCore_DP0 pid=1025) ERROR 11-28 13:11:39 [dump_input.py:79]        dtype=torch.bfloat16), "
        "field=MultiModalBatchedField())}\n",
        "not_oom_other",
        False,
        "low",
    ),
    "the_same_text_from_another_module_is_no_dump": Case(
        "(EngineCore_DP0 pid=142) ERROR 11-01 10:54:19 [core.py:79]         1., 1., 1., 1., 1., 1.,\n",
        "unknown",
        False,
    ),
    "the_runai_model_streamer_failing_is_weight_loading": Case(
        "Traceback (most recent call last):\n"
        '  File "runai_model_streamer/libstreamer/libstreamer.py", line 89, in runai_response\n'
        "    raise ValueError(\n"
        "ValueError: Could not receive runai_response from libstreamer due to: b'File access error'\n",
        "weight_loading",
        False,
    ),
    "v0s_api_server_waiting_for_an_engine_that_never_came_up_is_a_stall": Case(
        "INFO 05-31 01:40:02 api_server.py:753] vLLM API server version 0.6.4\n"
        "INFO 05-31 01:40:10 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with config: model='m'\n"
        + MQWAIT
        + MQWAIT,
        "timeout",
        False,
        "medium",
    ),
    "the_same_wait_after_the_ready_line_is_an_idle_server": Case(
        "INFO 05-31 01:40:40 launcher.py:27] Route: /v1/completions, Methods: POST\n"
        "INFO:     Application startup complete.\n" + MQWAIT + MQWAIT,
        "healthy",
        False,
    ),
    "a_traceback_after_the_wait_ended_it": Case(
        MQWAIT + MQWAIT + "ERROR 07-31 02:24:27 [engine.py:456]     self.model_runner.load_model()\n"
        'ERROR 07-31 02:24:27 [engine.py:456]   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/'
        'model_runner.py", line 1086, in load_model\n',
        "weight_loading",
        False,
    ),
    "a_traceback_cut_inside_a_cuda_graphs_capture_is_graph_capture": Case(
        W
        + "Traceback (most recent call last):\n"
        + W
        + '  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3310, in _dummy_run\n'
        + W
        + "    outputs = self.model(\n"
        + W
        + '  File "/venv/lib/python3.12/site-packages/vllm/compilation/cuda_graph.py", line 182, in __call__\n'
        + W
        + "    with torch.cuda.graph(\n",
        "cudagraph_capture",
        False,
    ),
    "an_ascend_graph_capture_that_fails_to_begin_is_graph_capture": Case(
        "(EngineCore_0 pid=519998) ERROR 08-05 11:23:25 [core.py:632] RuntimeError: capture_begin:build/CMakeFiles/"
        "torch_npu.dir/compiler_depend.ts:156 NPU function error: c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, "
        "capture_mode), error code is 207005\n",
        "cudagraph_capture",
        False,
    ),
    "the_cann_runtime_failing_to_begin_a_capture_stream_is_graph_capture": Case(
        "(EngineCore pid=386) ERROR 07-15 13:23:59 [core.py:1136]        rtStreamBeginCapture execution failed, "
        "reason=driver error:resource alloc fail[FUNC:FuncErrorReason][FILE:error_message_manage.cc]\n",
        "cudagraph_capture",
        False,
    ),
    "the_body_of_a_dynamo_graph_break_message_is_torch_compile": Case(
        "(Worker_TP11 pid=128828) ERROR 12-18 09:39:44 [multiproc_executor.py:671]   Explanation: Dynamo found no "
        "exception handler at the top-level compiled function when encountering an exception.\n"
        "(Worker_TP11 pid=128828) ERROR 12-18 09:39:44 [multiproc_executor.py:671]   Developer debug context:\n",
        "cudagraph_capture",
        False,
        "low",
    ),
    "a_traceback_cut_in_torch_cuda_graphs_capture_is_graph_capture": Case(
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/torch/cuda/graphs.py", line 186, in __enter__\n'
        "    self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)\n",
        "cudagraph_capture",
        False,
    ),
    "a_graphs_replay_is_no_capture": Case(
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/torch/cuda/graphs.py", line 88, in replay\n'
        "    super().replay()\n",
        "unknown",
        False,
    ),
    "an_image_without_ldconfig_is_the_environment": Case(
        "FileNotFoundError: [Errno 2] No such file or directory: 'ldconfig'\n",
        "environment",
        False,
    ),
    "a_name_the_release_does_not_know_is_a_refused_setting": Case(
        "Traceback (most recent call last):\nValueError: Unknown speculative decoding method: mlp_speculator\n",
        "environment",
        False,
        "low",
    ),
    "an_unknown_error_is_no_refused_setting": Case(
        "Traceback (most recent call last):\nRuntimeError: Unknown error occurred in the worker\n",
        "not_oom_other",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session26_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
