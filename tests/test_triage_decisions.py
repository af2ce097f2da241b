"""The kinds of real logs triage used to miss (issue 13), each as a small log written for the test
from the lines vLLM prints (not copied from the held-out corpus): the verdict, is_oom, and what
decided it."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomkit.triage import analyse

KINDS = Path(__file__).parent / "fixtures" / "kinds"

# file: (phase, is_oom, confidence, decided_by)
EXPECTED = {
    # "CUDA out of memory occurred when warming up sampler": the profiling step, a memory error.
    "sampler.log": ("memory_profiling", True, "high", "template"),
    # A traceback through capture_model with a plain CUDA OOM: graph capture, from the frames.
    "capture.log": ("cudagraph_capture", True, "high", "frames"),
    # A PyNcclCommunicator stack ending in an NCCL error: the network, not memory.
    "nccl.log": ("network_communication", False, "high", "template"),
    # Ray waiting for a placement group, and nothing after: the cluster cannot place the workers.
    "placement.log": ("network_communication", False, "medium", "template"),
    # The same wait, then the engine went on to start: no failure.
    "placement_ok.log": ("healthy", False, None, None),
    # One torch.OutOfMemoryError line and nothing else: an OOM, its phase a low-confidence guess (a request's prefill:
    # start-up failures are pasted with their markers, a serving failure by its error line).
    "lone.log": ("serving_prefill", True, "low", "context"),
    # Stats lines at KV 100% with requests waiting, no crash: cache pressure, from the stats.
    "pressure.log": ("cache_pressure", False, "medium", "context"),
    "preempt.log": ("cache_pressure", False, "medium", "context"),
    # An OOM in the sampler while the last stats line shows only generation: decode.
    "decode.log": ("serving_decode", True, "medium", None),
    # Model construction running out of memory: weight loading, not serving.
    "unquant.log": ("weight_loading", True, None, None),
    # The same message alone (no marker): its own wording places it (weight tensors being created).
    "unquant_lone.log": ("weight_loading", True, "high", "template"),
    # A worker killed by SIGILL (exit code -4) on its first request: the build's instructions do not run
    # on this host (a real vLLM 0.32 CPU log from this machine, after its VM's CPU changed): environment.
    "sigill.log": ("environment", False, "high", "template"),
    # A kernel crash with no frames after the last start-up marker (graph capture, no ready line): the
    # decision order puts the marker before the message, so it is that step's failure, not a serving
    # crash (`not_oom_other`), and a low-confidence one.
    "capture_crash_marker.log": ("cudagraph_capture", False, "low", "marker"),
    # A kernel crash inside graph capture (capture_model -> _dummy_run): the frames come before the
    # message, so the start-up phase they name, not `not_oom_other`; `_dummy_run`, which profiling
    # calls too, does not outrank the capture frame that called it.
    "capture_illegal.log": ("cudagraph_capture", False, "medium", "frames"),
    # The same crash while serving (execute_model after the server was ready): `not_oom_other`.
    "serving_illegal.log": ("not_oom_other", False, "high", "template"),
    # V0's engine loop hung past ENGINE_ITERATION_TIMEOUT_S: a timeout, not a decode failure.
    "iter.log": ("timeout", False, "high", "template"),
    # The engine's traceback ends in shm_broadcast's dequeue (the wait for a worker's reply), its exception
    # cut: the worker never answered.
    "replywait.log": ("timeout", False, "low", "frames"),
    # IPython/Jupyter frames (`File path.py:N, in Class.method`) through _allocate_kv_cache, under IPython's
    # header that names the exception class: KV-cache allocation, from the frames.
    "ipython.log": ("kv_cache_allocation", True, "high", "frames"),
    # NCCL quoting a CUDA stream-capture error during capture: graph capture, not the network.
    "capture_nccl.log": ("cudagraph_capture", False, "high", "template"),
    # vLLM's Ray executor finds no GPU bundle on the driver's node: the cluster's layout, as "Current node has no GPU
    # available" from the same set-up is (environment since session 17; 3 of 4 dev cases label it so).
    "rayplace.log": ("environment", False, "high", "template"),
    # PyTorch's TCPStore: not every rank joined the rendezvous.
    "tcpstore.log": ("network_communication", False, "high", "template"),
    # The KV pool was sized (# GPU blocks) and nothing failed; the excerpt ends before ready.
    "kvsized.log": ("healthy", False, "low", "marker"),
    # The last stats line shows the KV cache at 93%: the server ends at the edge of its KV capacity.
    "nearfull.log": ("cache_pressure", False, "low", "context"),
    # Only V1's failed-step dump: a model-execution step raised while serving; its exception is cut.
    "dump.log": ("not_oom_other", False, "low", None),
    # V0's scheduler ignored a prompt over its limit: a request-length setting.
    "v0prompt.log": ("not_oom_other", False, "high", "template"),
    # The dynamic loader cannot find a CUDA library: the installation.
    "sharedobj.log": ("environment", False, "high", "template"),
    # V0's wrapper names the method the worker failed in (determine_num_available_blocks): profiling.
    "workermethod.log": ("memory_profiling", False, "low", "frames"),
    # Transformers does not know the checkpoint's model_type (AutoConfig): the installation is too old.
    "modelcfg.log": ("environment", False, "high", "template"),
    # vLLM's platform refuses the attention backend for this GPU/config (get_attn_backend_cls).
    "backend.log": ("environment", False, "high", "template"),
    # Triton/Inductor's JIT build cannot link libcuda (GNU ld), after weights loaded: the host's toolchain.
    "jitbuild.log": ("environment", False, "high", "template"),
    # vLLM found no platform (no CUDA/ROCm/CPU detected): the installation.
    "noplatform.log": ("environment", False, "high", "template"),
    # An assertion in an attention backend's constructor, then V1's fatal-signal handler kills its own
    # process tree ("Killed"): environment from the frames, and not a host OOM.
    "selfkill.log": ("environment", False, "medium", "frames"),
    # vLLM logs "Cannot use FA version" at error level and falls back to another backend: no failure.
    "fafallback.log": ("unknown", False, "low", None),
    # The engine's traceback ends in the multiproc executor's wait for a worker's reply, exception cut.
    "executorwait.log": ("timeout", False, "low", "frames"),
    # A lone OOM whose message shows CUDA-graph private pools in use: past graph capture, i.e. serving.
    "privatepools.log": ("serving_prefill", True, "low", "context"),
    # V1's API server: the output handler got EngineDeadError (a started core died), the core's own error
    # not in the log: a crash while serving whose exception is missing, `not_oom_other` (low).
    "enginedead.log": ("not_oom_other", False, "low", None),
    # V0's background engine loop died (its done-callback raises AsyncEngineDeadError); the loop starts
    # with the first request, so this is serving.
    "deadloop.log": ("not_oom_other", False, "low", "frames"),
    # The engine core's traceback is cut after its first frame, while the API server's output handler
    # (serving path) shows in another process: the server had started.
    "cutcore.log": ("not_oom_other", False, "low", "frames"),
    # Frames hard-wrapped at a fixed width (the path or its `, line N, in f` on the next line, with no log
    # prefix): joined again, they place the worker's failure in vllm/distributed, the network.
    "wrapped.log": ("network_communication", False, "low", "frames"),
    # A traceback cut inside FlashInfer's JIT loader (get_batch_prefill_module builds the kernel on first
    # use) during the profiling run: the installation's toolchain, not profiling.
    "flashinfer_jit.log": ("environment", False, "low", "frames"),
    # 0.6's TPU executors print the pool as "# TPU blocks: N": the KV cache was sized, nothing failed.
    "tpu_blocks.log": ("healthy", False, "low", "marker"),
    # V0's "Loading model weights took X GB" ends weight loading: a cut traceback after it is in the
    # next step, the profiling run.
    "v0_weights_took.log": ("memory_profiling", False, "low", "marker"),
    # V1's engine core fails after the rank assignment and before "Starting to load model" (which every
    # vLLM from 0.6 logs as load_model begins), its exception cut: device / model-runner set-up.
    "before_load.log": ("environment", False, "low", "marker"),
    # An OOM in V1's sampler with CUDA graphs already captured and no ready line: the sampler warm-up,
    # which V1 runs after capture_model (the corpus labels sampler warm-up `memory_profiling`).
    "sampler_warmup.log": ("memory_profiling", True, "low", "context"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kind(name):
    verdict = analyse([str(KINDS / name)]).verdict
    phase, is_oom, confidence, decided = EXPECTED[name]
    assert (verdict.phase, verdict.is_oom) == (phase, is_oom), verdict.summary
    if confidence:
        assert verdict.confidence == confidence, verdict.confidence_reason
    if decided:
        assert verdict.decided_by == decided


def test_every_fixture_has_an_expectation():
    assert {p.name for p in KINDS.glob("*.log")} == set(EXPECTED)


def test_cache_pressure_cites_the_full_stats_lines():
    verdict = analyse([str(KINDS / "pressure.log")]).verdict
    assert any("KV cache usage: 100.0%" in ev.text for ev in verdict.evidence)
    assert "KV cache >= 95%" in verdict.summary


def test_decode_and_prefill_are_told_apart_by_the_last_stats_line(tmp_path):
    """The same OOM after a stats line with prompt throughput is prefill; with none, decode."""
    text = (KINDS / "decode.log").read_text()
    prefill = text.replace(
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1900.0",
        "Avg prompt throughput: 5000.0 tokens/s, Avg generation throughput: 10.0",
    )
    log = tmp_path / "prefill.log"
    log.write_text(prefill)
    assert analyse([str(log)]).verdict.phase == "serving_prefill"


def test_a_failure_after_the_load_start_stays_in_weight_loading(tmp_path):
    """The same cut failure as before_load.log, once "Starting to load model" was logged: weight loading."""
    lines = (KINDS / "before_load.log").read_text().splitlines(keepends=True)
    start = "INFO 05-26 07:50:26 [gpu_model_runner.py:1770] Starting to load model org/model-8b...\n"
    log = tmp_path / "loading.log"
    log.write_text("".join([*lines[:3], start, *lines[3:]]))
    verdict = analyse([str(log)]).verdict
    assert (verdict.phase, verdict.is_oom) == ("weight_loading", False), verdict.summary


def test_private_pools_outside_the_sampler_stay_serving(tmp_path):
    """The sampler warm-up rule needs the sampler's frames: the same OOM with a model-forward frame is
    past start-up (the private-pools reading), and after a ready line the sampler is serving."""
    text = (KINDS / "sampler_warmup.log").read_text()
    forward = tmp_path / "forward.log"
    forward.write_text(text.replace("vllm/v1/sample/sampler.py", "vllm/model_executor/models/llama.py"))
    assert analyse([str(forward)]).verdict.phase == "serving_prefill"
    ready = tmp_path / "ready.log"
    ready.write_text("(APIServer pid=2100) INFO 05-05 12:00:00 [launcher.py:44] Application startup complete.\n" + text)
    assert analyse([str(ready)]).verdict.phase.startswith("serving_")


def test_a_lone_oom_far_over_the_memory_budget_is_not_read_as_serving(tmp_path):
    """PyTorch holding 98% of the device reads as "KV pool allocated, so serving" under the default
    0.9 budget; with --gpu-memory-utilization 0.6 that much is far past any budgeted step (weights). (PyTorch has
    freed and cached 600 MiB, so the cache alone does not say weights.)"""
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 140.00 MiB. GPU 0 has a total capacity of "
        "40.00 GiB of which 30.00 MiB is free. Process 4242 has 39.90 GiB memory in use. Of the allocated memory "
        "39.20 GiB is allocated by PyTorch, and 600.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    plain = tmp_path / "plain.log"
    plain.write_text(oom)
    assert analyse([str(plain)]).verdict.phase == "serving_prefill"
    budgeted = tmp_path / "budgeted.log"
    budgeted.write_text("vllm serve org/model-8b --gpu-memory-utilization 0.6 --max-model-len 8192\n" + oom)
    verdict = analyse([str(budgeted)]).verdict
    assert (verdict.phase, verdict.confidence) == ("weight_loading", "low"), verdict.summary
    assert analyse([str(budgeted)]).facts.figures["gpu_memory_utilization"] == 0.6


V0_WRAPPER = (
    '[rank0]:   File "/usr/lib/python3.10/site-packages/vllm/worker/model_runner_base.py", line 116, in _wrapper\n'
    "[rank0]:     return func(*args, **kwargs)\n"
    '[rank0]:   File "/usr/lib/python3.10/site-packages/vllm/worker/mo\n'
)


def test_v0_execute_model_wrapper_places_a_cut_traceback(tmp_path):
    """V0 0.6's `dump_input_when_exception` wraps the GPU runner's execute_model (model_runner_base.py
    `_wrapper`): a traceback cut below it is execute_model's, so serving (exception unknown: not_oom_other,
    low), and the profiling pass when `profile_run` is above it."""
    cut = tmp_path / "cut.log"
    cut.write_text(V0_WRAPPER)
    verdict = analyse([str(cut)]).verdict
    assert (verdict.phase, verdict.is_oom, verdict.confidence) == ("not_oom_other", False, "low"), verdict.summary
    profiling = tmp_path / "profiling.log"
    profiling.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/usr/lib/python3.10/site-packages/vllm/worker/model_runner.py", line 1331, in profile_run\n'
        "[rank0]:     self.execute_model(model_input, kv_caches, intermediate_tensors)\n" + V0_WRAPPER
    )
    assert analyse([str(profiling)]).verdict.phase == "memory_profiling"
    other = tmp_path / "other.log"  # a `_wrapper` of any other module places nothing
    other.write_text(V0_WRAPPER.replace("worker/model_runner_base.py", "utils/decorators.py"))
    assert analyse([str(other)]).verdict.phase == "unknown"
