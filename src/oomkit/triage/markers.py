"""Phase markers: lines that prove a start-up or serving phase was reached, and the lines around
them the timeline needs (a restart, a shutdown, a step slower than the readiness timeout)."""

from __future__ import annotations

from oomkit.triage.rules import LOGO, Marker, V, gate, rx

MARKERS: tuple[Marker, ...] = (
    Marker(
        "R-VER",
        rx(r"^vLLM (?:API )?server version (?P<ver>\S+?),?(?: serving model (?P<model>.+))?$"),
        "environment",
        "weight_loading",
        "vLLM API server version 0.6.6, serving model x",
        f"{V} §2.3 R-VER",
    ),
    Marker(
        "R-LOGO",
        rx(LOGO + r"(?:version|model)\s+(?P<v>\S+)\s*$"),
        "environment",
        "weight_loading",
        "█▄█▀ █     █     █     █  version 0.32.0",
        f"{V} §2.2 P0 logo (≥0.17)",
    ),
    Marker(
        "R-ARGS",
        rx(r"^(?:non-default args: \{|args: Namespace\()"),
        "environment",
        "weight_loading",
        "non-default args: {'model': 'm', 'max_model_len': 1024}",
        f"{V} §2.3 R-ARGS",
    ),
    Marker(
        "R-ARCH",
        rx(r"^Resolved architecture: (?P<arch>\S+)"),
        "environment",
        "weight_loading",
        "Resolved architecture: LlamaForCausalLM",
        f"{V} §2.3 R-ARCH",
    ),
    Marker(
        "R-PLATFORM",
        rx(r"^Automatically detected platform (?P<p>\w+)\."),
        "environment",
        "weight_loading",
        "Automatically detected platform cuda.",
        f"{V} §2.3 R-PLATFORM",
    ),
    Marker(
        "R-ENGINE",
        rx(r"^Initializing an? (?:V[01] )?LLM engine \(v(?P<ver>[^)]+)\) with config: "),
        "distributed_init",
        "weight_loading",
        "Initializing a V1 LLM engine (v0.32.0) with config: model='m', tensor_parallel_size=1",
        f"{V} §2.3 R-ENGINE",
    ),
    Marker(
        "R-DIST",
        rx(r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=\S+ backend="),
        "distributed_init",
        "weight_loading",
        "world_size=8 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:1 backend=nccl",
        f"{V} §2.3 R-DIST",
    ),
    Marker(
        "R-NCCLVER",
        rx(r"^vLLM is using nccl==(?P<v>[\d.]+)"),
        "distributed_init",
        "weight_loading",
        "vLLM is using nccl==2.27.3",
        f"{V} §2.3 R-NCCLVER",
    ),
    Marker(
        "R-RANKMAP",
        rx(r"^rank \d+ in world size \d+ is assigned as "),
        "distributed_init",
        "weight_loading",
        "rank 0 in world size 8 is assigned as DP rank 0, PP rank 0, TP rank 0",
        f"{V} §2.3 R-RANKMAP",
    ),
    Marker(
        "R-LOADSTART",
        rx(
            r"^(?:Starting to load model .+|Loading model from scratch\.\.\.|Loading model weights? (?!took ).*|Using model weights format"
            # the speculative decoder's draft model, loaded by the same GPUModelRunner.load_model (0.10.2-0.2x)
            r"|Loading drafter model\.\.\.)"
        ),
        "weight_loading",
        "weight_loading",
        "Starting to load model /models/tiny...",
        # Not V0's "Loading model weights took X GB": that line ends the step (R-MODELLOAD).
        f"{V} §2.3 R-LOADSTART",
    ),
    Marker(
        "R-SHARDS",
        rx(r"Loading (?:safetensors|pt) checkpoint shards"),
        "weight_loading",
        "weight_loading",
        "Loading safetensors checkpoint shards:  42% Completed | 21/50",
        f"{V} §2.3 R-SHARDS",
    ),
    Marker(
        "R-WEIGHTS",
        rx(r"^Loading weights took (?P<s>[\d.]+) seconds"),
        "weight_loading",
        "weight_loading",
        "Loading weights took 37.12 seconds",
        f"{V} §2.3 R-WEIGHTS",
    ),
    Marker(
        "R-MODELLOAD",
        rx(r"^(?:Model loading took|Loading model weights took) (?P<gib>[\d.]+) G(?:i)?B"),
        "weight_loading",
        "memory_profiling",
        "Model loading took 15.23 GiB memory and 41.12 seconds",
        f"{V} §2.3 R-MODELLOAD; V0 'Loading model weights took X GB'",
    ),
    Marker(
        "R-COMPILE",
        rx(
            r"^(?:\[[^\]]+\] )?(?:Starting torch\.compile|Using cache directory: .+ for vLLM's torch\.compile|Dynamo bytecode transform time|Compiling a graph for|Directly load the compiled graph|torch\.compile t(?:akes|ook)|Initial profiling/warmup run took|Compiling model again)"
        ),
        "memory_profiling",
        "memory_profiling",
        "Dynamo bytecode transform time: 9.81 s",
        f"{V} §2.2 P3 (compile runs inside the profiling pass)",
    ),
    Marker(
        "R-PROFILE",
        rx(
            r"^(?:Memory profiling takes|Memory profiling results|Estimated CUDA graph memory|Profiling CUDA graph memory)"
        ),
        "memory_profiling",
        "memory_profiling",
        "Estimated CUDA graph memory: 1.23 GiB total",
        f"{V} §2.3 R-CGEST; V0 profiling block",
    ),
    Marker(
        "R-MMPROFILE",
        # vllm/multimodal/profiling.py (0.7-0.11, warning_once): the dummy multimodal data that the profiling
        # run builds (V0 profile_run; V1 profile_run's encoder pass via _get_mm_dummy_batch) does not fit the
        # profiling sequence length; printed the first time, so during profiling.
        rx(
            r"^The (?:encoder )?sequence length used for profiling \(max_num_batched_tokens / max_num_seqs = \d+\) "
            r"is too short"
        ),
        "memory_profiling",
        "memory_profiling",
        "The sequence length used for profiling (max_num_batched_tokens / max_num_seqs = 20000) is too short to hold "
        "the multi-modal embeddings in the worst case",
        "vllm/multimodal/profiling.py get_decoder_dummy_data / get_encoder_dummy_data (warning_once)",
    ),
    Marker(
        "R-AVAIL",
        rx(
            r"^(?:Available KV cache memory: -?[\d.]+ GiB|Initial free memory [\d.]+ GiB, reserved|(?:Auto|Explicitly) set \([\d.]+/[\d.]+\) GiB for KV cache|CUDA graph memory profiling is enabled|.*the rest of the memory reserved for KV Cache)"
            # vllm-ascend's worker reports the KV budget in bytes ("Available memory: 0, total memory: 65452113920")
            r"|^Available memory: -?\d+, total memory: \d+$"
        ),
        "kv_cache_allocation",
        "kv_cache_allocation",
        "Available KV cache memory: 52.3 GiB",
        f"{V} §2.3 R-AVAIL/R-KVBYTES/R-CPUKV; vllm-ascend worker_v1.py (NPUWorker.determine_available_memory) as its "
        "logs print it",
    ),
    Marker(
        "R-KVPLAN",
        rx(
            r"^(?:[A-Z]+(?: \+ host)? KV cache size: [\d,]+ tokens|Maximum concurrency for [\d,]+ tokens|# (?:GPU|CUDA|CPU|TPU|HPU|cuda|rocm|xpu|hpu|tpu|neuron) blocks: \d+|GPU blocks: \d+|Overriding num_gpu_blocks|Auto-fit max_model_len|.*reduced max_model_len from|Add \d+ padding layers|kv cache group sizes)"
        ),
        "kv_cache_allocation",
        "kv_cache_allocation",
        "GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 32,768 tokens per request: 37.68x",
        f"{V} §2.3 R-KVSIZE/R-CONC/R-V0BLOCKS; 0.6's tpu_executor.py/hpu_executor.py ('# TPU blocks: %d')",
    ),
    Marker(
        "R-CAPTURE",
        rx(
            r"(?:^Compile and warming up model for size|Capturing (?:[\w%-]+ ){0,3}(?:CUDA|ACL) graphs?|^Capturing (?:cudagraphs|the model for CUDA graphs)|^Graph capturing finished in|^CUDA graph pool memory:|^Free memory on device \([\d.]+/[\d.]+ GiB\) on startup\. Desired)"
        ),
        "cudagraph_capture",
        "cudagraph_capture",
        "Graph capturing finished in 12 secs, took 0.87 GiB",
        # the progress bar's desc names what it captures in newer vLLM: "Capturing prefill CUDA graphs", "Capturing
        # decode CUDA graphs", "Capturing multi-module MTP CUDA graphs" (v1/worker/gpu/spec_decode/*/speculator.py);
        # vllm-ascend's model runner captures ACL graphs under the same bar ("Capturing ACL graphs (mixed prefill-decode,
        # PIECEWISE)")
        f"{V} §2.3 R-WARMSIZE/R-CAPBAR/R-CAPDONE/R-BREAKDOWN",
    ),
    Marker(
        "R-INITDONE",
        # Printed at the end of the engine's KV and warm-up step (V1 EngineCore._initialize_kv_caches, V0
        # LLMEngine._initialize_kv_caches), after profiling, the KV pool and graph capture: no start-up memory step comes
        # after it, so what fails later is read as serving (an offline LLM run has no "Application startup complete")
        rx(r"^init engine \(profile, create kv cache, warmup model\) took"),
        "cudagraph_capture",
        "serving",
        "init engine (profile, create kv cache, warmup model) took 37.22 s",
        f"{V} §2.3 R-INITDONE (engine warm; API server not up yet)",
    ),
    Marker(
        "R-READY",
        # "Available routes are:" is serve_http's first line (vllm/entrypoints/launcher.py; launchers/launcher.py
        # in 0.32), and "Route: /health, Methods: GET" the lines it prints next, one a route: the engine client is built
        # before the server is, so the engine is ready when they print.
        # Sleep mode's reports (v1/worker/gpu_worker.py Worker.sleep "Sleep mode freed ...", executor_base/abstract.py
        # "It took N seconds to fall asleep" / "to wake up", 0.7.3-0.34) come only from a built engine: LLM.sleep and
        # wake_up need one, so the engine was ready.
        rx(
            r"^(?:Starting vLLM (?:API )?server(?: \d+)? on|Application startup complete|Available routes are:"
            r"|Route: /\S*, Methods: "
            r"|Sleep mode freed [\d.]+ GiB memory|It took [\d.]+ seconds to (?:fall asleep|wake up))"
        ),
        "ready",
        "serving",
        "Application startup complete.",
        f"{V} §2.3 R-INITDONE/R-SERVER/R-UVI-READY/R-ROUTE",
    ),
    Marker(
        "R-SERVE",
        rx(
            r"^(?:(?:Engine \d{3}|\d+ Engines Aggregated): Avg prompt throughput|Avg prompt throughput: [\d.]+ tokens/s|Added request|Received request"
            # speculative decoding's periodic metrics, printed only while requests run: V1 vllm/v1/spec_decode/metrics.py
            # ("SpecDecoding metrics: "), V0 vllm/engine/metrics.py ("Speculative metrics: ")
            r"|SpecDecoding metrics: |Speculative metrics: "
            # uvicorn's access log of an inference request answered with success: the API server answers only once
            # the engine is built (serve_http runs after the engine client is up), and a 2xx is the engine's output
            # (a status poll or a health check is not progress, and a failed request is a request error)
            r'|\S+ - "POST /v1/\S+ HTTP/[\d.]+" 2\d\d\b'
            # a serving benchmark's summary (vllm/benchmarks/serve.py, benchmark_serving.py before it, and SGLang's
            # bench_serving print the same table) counting requests the server completed
            r"|Successful requests:\s+[1-9]\d*\s*$"
            # uvicorn's report of a request handler that raised (uvicorn/protocols/http/*_impl.py run_asgi: "Exception
            # in ASGI application"): the API server was answering a request, so start-up was over, whatever start-up
            # step the handler's traceback runs again (a LoRA adapter loaded for its first request)
            r"|Exception in ASGI application\s*$)"
        ),
        "serving",
        "serving",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
        f"{V} §2.3 R-STATS-HEAD; vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log; V0 vllm/engine/metrics.py; "
        "uvicorn's access log (vllm/entrypoints/launcher.py serve_http, after the engine client is built)",
    ),
)

# A worker that dies before any weight-loading marker died in device or distributed init.
WORKER_START = rx(r"WorkerProc failed to start|WorkerProc initialization failed")
# A startup marker after ready means a new start in the same log.
RESTART_MARKERS = frozenset({"R-VER", "R-LOGO", "R-ARGS"})

SHUTDOWN = rx(
    r"\[shutdown\] API server: shutdown triggered|^Shutting down$|Received SIGTERM|received signal|KeyboardInterrupt|shutdown triggered|Terminated$"
)

# A step that ran longer than vLLM's default readiness timeout (VLLM_ENGINE_READY_TIMEOUT_S=600).
SLOW_STEP = rx(r"(?:takes|took) (?P<s>[\d.]+) s(?:econds)?(?: in total)?\b")
READY_TIMEOUT_S = 600.0

MARKER_GATE = gate([m.pattern for m in MARKERS] + [SHUTDOWN, SLOW_STEP])
