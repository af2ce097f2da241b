"""Classes of session 10 (issue 13). The API server's route listing (vllm/entrypoints/launcher.py serve_http,
launchers/launcher.py in 0.32: "Available routes are:" then one "Route: ..." per route) is printed after the
engine client is built, so the engine is ready. And terminal output pasted as HTML (aha, ansi2html, a browser's
copy of a coloured terminal): the colour and weight tags are not part of the log; a traceback's `<module>` is.
Python logging's own formats (an application configuring vLLM's loggers). The attention selector finding no valid
backend (vllm/platforms/cuda.py, rocm.py get_attn_backend_cls); vLLM's custom all-reduce CUDACHECK
(csrc/custom_all_reduce.cuh: "Failed: Cuda error FILE:LINE 'text'"): the link, unless start-up was capturing graphs,
whose buffers it registers; ninja's line for a failed build edge (a JIT build: FlashInfer, Triton, torch extensions).
And a traceback cut before its exception line whose innermost frame's source line raises with a literal message
(CPython prints each frame's source line): that message is the exception's (vllm/v1/engine/core_client.py
`raise TimeoutError("Timed out waiting for engines to send"`). And frames of the user's own script (not vLLM, a
plugin or an installed package) name no vLLM step: an application's `load_model` around vLLM's Ray set-up. A
frame's executing source line that calls a start-up step (`self.model_runner._dummy_sampler_run(`) names the next
frame's step when the traceback is cut before it. Speculative decoding's periodic metrics (vllm/v1/spec_decode/metrics.py)
print only while requests run; the capture progress bar names what it captures in newer vLLM ("Capturing prefill
CUDA graphs", v1/worker/gpu/spec_decode/*/speculator.py); a native abort (glibc's assert(), abseil's signal handler
that Ray installs, CPython's faulthandler) is a crash, not memory. A kernel or backend that refuses the GPU's
architecture ("Sinks are only supported in FlashAttention 3", "only supported on Hopper devices", DeepGEMM's
"Unsupported architecture") is the environment; a library's fallback warning ("on an unsupported architecture!
Overriding") is not a failure. vLLM's NCCL wrapper failing to load the library (pynccl_wrapper.py "Failed to load
NCCL library from") is the installation, not the link; CUDA initialised before a fork (torch/cuda/__init__.py
_lazy_init, "Cannot re-initialize CUDA in forked subprocess") is the environment. The start-up free-memory check in
its shorter wording (vLLM 0.19-0.28: "Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57
GiB)") is the same check as "... on startup is less than desired GPU memory utilization"."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames

from oomkit.logs.line import clean, parse_line

ROUTES = (
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:37] Available routes are:\n"
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:46] Route: /openapi.json, Methods: HEAD, GET\n"
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:46] Route: /health, Methods: GET\n"
)
HTML_PREFIX = '<font color="#2AA1B3"><b>(APIServer pid=128291)</b></font> '
HTML_READY = (
    HTML_PREFIX + "INFO 11-11 12:22:01 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
)
READY_LINE = (
    "(APIServer pid=7) INFO 11-04 12:20:01 [api_server.py:1520] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
)
CUSTOM_AR = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:143 'invalid resource handle'\n"
API = "(ApiServer_7 pid=16) "
HANDSHAKE = frames(
    API,
    ("vllm/v1/engine/async_llm.py", "__init__", "self.engine_core = EngineCoreClient.make_async_mp_client("),
    ("vllm/v1/engine/core_client.py", "__init__", "super().__init__("),
)
RAISE_TIMEOUT = API + '    raise TimeoutError("Timed out waiting for engines to send"\n'
APP_FRAME = (
    '  File "/home/me/demo/web_demo.py", line 127, in load_model\n    llm = AsyncLLMEngine.from_engine_args(args)\n'
)
RAY_SETUP = frames(
    "",
    ("vllm/engine/async_llm_engine.py", "_get_executor_cls", "initialize_ray_cluster(engine_config.parallel_config)"),
    ("vllm/executor/ray_utils.py", "initialize_ray_cluster", "raise ValueError("),
).replace("Traceback (most recent call last):\n", "")
CORE = "(EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [core.py:842] "
CASES = {
    "startup_free_memory_short_wording": Case(
        "ValueError: Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57 GiB)\n",
        "environment",
        True,
        "high",
    ),
    "startup_free_memory_shortest_wording": Case(
        "ValueError: Free memory (31.73 GiB) < desired utilization (125.83 GiB)\n", "environment", True, "high"
    ),
    "nccl_library_not_loaded": Case(
        "(VllmWorker rank=3 pid=44710) ERROR 08-20 09:48:31 [pynccl_wrapper.py:229] Failed to load NCCL library from "
        "/root/nccl/build/lib/libnccl.so.2.21.5. It is expected if you are not running on NVIDIA/AMD GPUs.\n",
        "environment",
        False,
    ),
    "cuda_in_forked_worker": Case(
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
        "the 'spawn' start method\n",
        "environment",
        False,
    ),
    "sinks_only_in_fa3": Case("AssertionError: Sinks are only supported in FlashAttention 3\n", "environment", False),
    "deepgemm_unsupported_architecture": Case(
        "(Worker_TP2 pid=100746) ERROR 04-27 23:40:50 [multiproc_executor.py:962] RuntimeError: Assertion error "
        "(/workspace/.deps/deepgemm-src/csrc/apis/hyperconnection.hpp:56): Unsupported architecture\n",
        "environment",
        False,
    ),
    "hipblaslt_fallback_warning": Case(
        READY_LINE
        + "/x/vllm/model_executor/layers/vocab_parallel_embedding.py:41: UserWarning: Attempting to use hipBLASLt on "
        "an unsupported architecture! Overriding blas backend to hipblas\n",
        "healthy",
        False,
    ),
    "spec_decode_metrics_only": Case(
        "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.37, "
        "Accepted throughput: 8.90 tokens/s, Drafted throughput: 97.50 tokens/s, Accepted: 89 tokens, Drafted: 975 "
        "tokens\n",
        "healthy",
        False,
        "medium",
    ),
    "crash_in_named_capture_bar": Case(
        "Capturing prefill CUDA graphs (FULL):   0%|          | 0/48 [00:00<?, ?it/s]\n"
        "(EngineCore pid=83108) ERROR 07-21 00:00:54 [core.py:1330] EngineCore failed to start.\n"
        "(EngineCore pid=83108) ERROR 07-21 00:00:54 [core.py:1330] RuntimeError: Error in function "
        "'trtllm_paged_attention_decode'\n",
        "cudagraph_capture",
        False,
    ),
    "glibc_assertion": Case(
        "python3: /project/lib/Analysis/Allocation.cpp:40: getCvtOrder: Assertion `!(srcMmaLayout && dstMmaLayout)' "
        "failed.\n",
        "not_oom_other",
        False,
    ),
    "abseil_sigabrt": Case(
        "[2024-04-09 11:01:46,817 E 19542 19712] logging.cc:361: *** SIGABRT received at time=1712674906 on cpu 3 ***\n",
        "not_oom_other",
        False,
    ),
    "sigill_stays_environment": Case(
        "*** SIGILL received at time=1712674906 on cpu 3 ***\nIllegal instruction (core dumped)\n", "environment", False
    ),
    "cut_after_a_call_of_the_sampler_warmup": Case(
        frames(
            CORE,
            ("vllm/v1/engine/core.py", "_initialize_kv_caches", "self.model_executor.initialize_from_config(configs)"),
            ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model", "self.model_runner._dummy_sampler_run("),
        )
        + "[...]\n",
        "memory_profiling",
        False,
    ),
    "app_load_model_around_ray_setup": Case(
        "Traceback (most recent call last):\n"
        + APP_FRAME
        + RAY_SETUP
        + "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
        "group.\n",
        "network_communication",
        False,
    ),
    "cut_traceback_raising_timeout": Case(HANDSHAKE + RAISE_TIMEOUT + "[...]\n", "timeout", False, "medium"),
    # a deeper frame under the raise: the raise was not where the exception came from
    "raise_above_a_deeper_frame": Case(
        HANDSHAKE
        + RAISE_TIMEOUT
        + API
        + '  File "/usr/lib/python3.12/selectors.py", line 9, in select\n'
        + API
        + "    fd_event_list = self._selector.poll(timeout)\n[...]\n",
        "unknown",
        False,
    ),
    # a re-raise names nothing
    "cut_traceback_reraising": Case(HANDSHAKE + API + "    raise e\n[...]\n", "unknown", False),
    "no_valid_attention_backend": Case(
        "(EngineCore_DP0 pid=5) ERROR 04-10 09:12:40 [core.py:866] ValueError: No valid attention backend found for "
        "cuda with AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=16, "
        "use_mla=False, has_sink=True). Reasons: {FLASH_ATTN: [sink setting not supported]}.\n",
        "environment",
        False,
        "high",
    ),
    "custom_allreduce_alone": Case(CUSTOM_AR, "network_communication", False, "high"),
    "custom_allreduce_in_cudagraph_profiling": Case(
        "INFO 03-02 10:00:01 [gpu_model_runner.py:4170] Profiling CUDA graph memory: PIECEWISE=2 (largest=2), "
        "FULL=1 (largest=1)\n" + CUSTOM_AR.replace("143 'invalid resource handle'", "455 'invalid argument'"),
        "cudagraph_capture",
        False,
        "medium",
    ),
    "ninja_failed_edge": Case(
        "(Worker_TP1 pid=29) ERROR 06-09 01:15:22 [multiproc_executor.py:962] FAILED: [code=1] "
        "/root/.cache/flashinfer/0.6.11/90a/cached_ops/sampling/sampling.so\n",
        "environment",
        False,
        "high",
    ),
    # pytest's summary line is not a build edge
    "pytest_failed_line": Case("FAILED tests/test_x.py::test_y - AssertionError\n", "unknown", False),
    "python_logging_dashed_format": Case(
        "2024-12-20 15:18:19 - vllm.executor.distributed_gpu_executor - INFO - # GPU blocks: 50231, # CPU blocks: "
        "8192\n2024-12-23 18:28:10 - vllm.engine.metrics - INFO - Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 45.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 3.1%, CPU "
        "KV cache usage: 0.0%.\n",
        "healthy",
        False,
    ),
    "routes_listed": Case(ROUTES, "healthy", False, "medium"),
    "html_pasted_ready": Case(HTML_READY, "healthy", False, "medium"),
    "html_pasted_oom": Case(
        HTML_PREFIX.replace("APIServer", "EngineCore_DP0")
        + "ERROR 11-11 12:22:05 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.\n",
        "serving_prefill",
        True,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session10_class(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    verdict = checked_verdict(name, case, tmp_path)
    if name == "cut_traceback_raising_timeout":
        assert "cut before its exception line" in verdict.confidence_reason
        assert verdict.evidence[0].text.endswith('raise TimeoutError("Timed out waiting for engines to send"')


@pytest.mark.parametrize(
    ("line", "level", "source", "msg"),
    [
        ("2024-12-20 15:18:19,123 - vllm.worker.worker - ERROR - boom", "ERROR", "vllm.worker.worker", "boom"),
        ("WARNING:vllm.engine.arg_utils:Chunked prefill is enabled", "WARNING", "vllm.engine.arg_utils", None),
    ],
)
def test_python_logging_formats_are_headers(line: str, level: str, source: str, msg: str | None) -> None:
    record = parse_line(line)
    assert (record.level, record.src) == (level, source)
    assert record.msg == (msg or line.split(":", 2)[2])


def test_html_tags_are_peeled_and_entities_decoded() -> None:
    record = parse_line(HTML_PREFIX + "WARNING 11-11 12:22:01 [x.py:1] max_num_seqs &gt; 256 &amp; more</span>")
    assert (record.pid, record.level, record.msg) == (128291, "WARNING", "max_num_seqs > 256 & more")


@pytest.mark.parametrize(
    "line",
    [
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/x/vllm/entrypoints/cli/main.py", line 73, in <module>',
        "a <b> that is not closed stays as typed",
        "x &gt; y without a tag stays as typed",
    ],
)
def test_text_without_formatting_tags_is_unchanged(line: str) -> None:
    assert clean(line) == line


def test_an_indented_paste_keeps_its_header() -> None:
    """A log quoted with an indent (a list item or a code block inside one) has vLLM's header after the spaces."""
    record = parse_line("        (APIServer pid=5496) DEBUG 06-04 12:45:33 [v1/metrics/loggers.py:259] Engine 000: x")
    assert (record.pid, record.level, record.msg) == (5496, "DEBUG", "Engine 000: x")
