"""The knowledge of triage, as data. Markers say which startup/serving phase a line proves was
reached; failures say what went wrong. Sources: shared/research/vllm-internals.md §2-§3 (vLLM
0.6-0.34 source read), cpu-testbed.md (real 0.32 CPU runs), and vLLM 0.32's own source where noted.
Every entry has an example line; tests check each example matches and passes the prefilter."""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM's logo lines: block characters and spaces, then `version X` or `model M`. A match starts only
# where a run of them starts (not `.*` from every block): linear on a 64 KB line of blocks.
LOGO = r"(?:^|(?<=[^█▀▄\s]))\s*[█▀▄][█▀▄\s]*\s"

# Timeline vocabulary, in startup order.
TIMELINE = (
    "environment",
    "distributed_init",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "ready",
    "serving",
)
# Verdict vocabulary.
PHASES = (
    "environment",
    "network_communication",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "timeout",
    "serving_prefill",
    "serving_decode",
    "cache_pressure",
    "not_oom_other",
    "healthy",
    "unknown",
)


@dataclass(frozen=True)
class Marker:
    id: str
    pattern: re.Pattern[str]
    phase: str  # timeline phase this line proves was reached
    after: str  # failure phase of a memory error that comes after this line ("serving" = decide)
    example: str
    source: str


@dataclass(frozen=True)
class Failure:
    id: str
    pattern: re.Pattern[str]
    cls: str  # oom, oom_host, kv, budget, network, environment, timeout, stall, crash, config, pressure, request, wrapper, exception
    # (stall: a wait that counts only while nothing later shows progress: a marker or a stats line)
    phase: str | None  # fixed verdict phase, or None: from frames and markers
    is_oom: bool
    rank: int  # the strongest failure found is the verdict's cause
    what: str
    example: str
    source: str
    excludes: tuple[str, ...] = ()  # rules this one overrides when both match the same line


def _re(p: str) -> re.Pattern[str]:
    return re.compile(p)


V = "vllm-internals.md"
T = "cpu-testbed.md (vLLM 0.32 CPU)"

MARKERS: tuple[Marker, ...] = (
    Marker(
        "R-VER",
        _re(r"^vLLM (?:API )?server version (?P<ver>\S+?),?(?: serving model (?P<model>.+))?$"),
        "environment",
        "weight_loading",
        "vLLM API server version 0.6.6, serving model x",
        f"{V} §2.3 R-VER",
    ),
    Marker(
        "R-LOGO",
        _re(LOGO + r"(?:version|model)\s+(?P<v>\S+)\s*$"),
        "environment",
        "weight_loading",
        "█▄█▀ █     █     █     █  version 0.32.0",
        f"{V} §2.2 P0 logo (≥0.17)",
    ),
    Marker(
        "R-ARGS",
        _re(r"^(?:non-default args: \{|args: Namespace\()"),
        "environment",
        "weight_loading",
        "non-default args: {'model': 'm', 'max_model_len': 1024}",
        f"{V} §2.3 R-ARGS",
    ),
    Marker(
        "R-ARCH",
        _re(r"^Resolved architecture: (?P<arch>\S+)"),
        "environment",
        "weight_loading",
        "Resolved architecture: LlamaForCausalLM",
        f"{V} §2.3 R-ARCH",
    ),
    Marker(
        "R-PLATFORM",
        _re(r"^Automatically detected platform (?P<p>\w+)\."),
        "environment",
        "weight_loading",
        "Automatically detected platform cuda.",
        f"{V} §2.3 R-PLATFORM",
    ),
    Marker(
        "R-ENGINE",
        _re(r"^Initializing an? (?:V[01] )?LLM engine \(v(?P<ver>[^)]+)\) with config: "),
        "distributed_init",
        "weight_loading",
        "Initializing a V1 LLM engine (v0.32.0) with config: model='m', tensor_parallel_size=1",
        f"{V} §2.3 R-ENGINE",
    ),
    Marker(
        "R-DIST",
        _re(r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=\S+ backend="),
        "distributed_init",
        "weight_loading",
        "world_size=8 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:1 backend=nccl",
        f"{V} §2.3 R-DIST",
    ),
    Marker(
        "R-NCCLVER",
        _re(r"^vLLM is using nccl==(?P<v>[\d.]+)"),
        "distributed_init",
        "weight_loading",
        "vLLM is using nccl==2.27.3",
        f"{V} §2.3 R-NCCLVER",
    ),
    Marker(
        "R-RANKMAP",
        _re(r"^rank \d+ in world size \d+ is assigned as "),
        "distributed_init",
        "weight_loading",
        "rank 0 in world size 8 is assigned as DP rank 0, PP rank 0, TP rank 0",
        f"{V} §2.3 R-RANKMAP",
    ),
    Marker(
        "R-LOADSTART",
        _re(
            r"^(?:Starting to load model .+|Loading model from scratch\.\.\.|Loading model weights? .*|Using model weights format)"
        ),
        "weight_loading",
        "weight_loading",
        "Starting to load model /models/tiny...",
        f"{V} §2.3 R-LOADSTART",
    ),
    Marker(
        "R-SHARDS",
        _re(r"Loading (?:safetensors|pt) checkpoint shards"),
        "weight_loading",
        "weight_loading",
        "Loading safetensors checkpoint shards:  42% Completed | 21/50",
        f"{V} §2.3 R-SHARDS",
    ),
    Marker(
        "R-WEIGHTS",
        _re(r"^Loading weights took (?P<s>[\d.]+) seconds"),
        "weight_loading",
        "weight_loading",
        "Loading weights took 37.12 seconds",
        f"{V} §2.3 R-WEIGHTS",
    ),
    Marker(
        "R-MODELLOAD",
        _re(r"^(?:Model loading took|Loading model weights took) (?P<gib>[\d.]+) G(?:i)?B"),
        "weight_loading",
        "memory_profiling",
        "Model loading took 15.23 GiB memory and 41.12 seconds",
        f"{V} §2.3 R-MODELLOAD; V0 'Loading model weights took X GB'",
    ),
    Marker(
        "R-COMPILE",
        _re(
            r"^(?:\[[^\]]+\] )?(?:Starting torch\.compile|Using cache directory: .+ for vLLM's torch\.compile|Dynamo bytecode transform time|Compiling a graph for|Directly load the compiled graph|torch\.compile t(?:akes|ook)|Initial profiling/warmup run took|Compiling model again)"
        ),
        "memory_profiling",
        "memory_profiling",
        "Dynamo bytecode transform time: 9.81 s",
        f"{V} §2.2 P3 (compile runs inside the profiling pass)",
    ),
    Marker(
        "R-PROFILE",
        _re(
            r"^(?:Memory profiling takes|Memory profiling results|Estimated CUDA graph memory|Profiling CUDA graph memory)"
        ),
        "memory_profiling",
        "memory_profiling",
        "Estimated CUDA graph memory: 1.23 GiB total",
        f"{V} §2.3 R-CGEST; V0 profiling block",
    ),
    Marker(
        "R-AVAIL",
        _re(
            r"^(?:Available KV cache memory: -?[\d.]+ GiB|Initial free memory [\d.]+ GiB, reserved|(?:Auto|Explicitly) set \([\d.]+/[\d.]+\) GiB for KV cache|CUDA graph memory profiling is enabled|.*the rest of the memory reserved for KV Cache)"
        ),
        "kv_cache_allocation",
        "kv_cache_allocation",
        "Available KV cache memory: 52.3 GiB",
        f"{V} §2.3 R-AVAIL/R-KVBYTES/R-CPUKV",
    ),
    Marker(
        "R-KVPLAN",
        _re(
            r"^(?:[A-Z]+(?: \+ host)? KV cache size: [\d,]+ tokens|Maximum concurrency for [\d,]+ tokens|# (?:GPU|CUDA|CPU) blocks: \d+|GPU blocks: \d+|Overriding num_gpu_blocks|Auto-fit max_model_len|.*reduced max_model_len from|Add \d+ padding layers|kv cache group sizes)"
        ),
        "kv_cache_allocation",
        "kv_cache_allocation",
        "GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 32,768 tokens per request: 37.68x",
        f"{V} §2.3 R-KVSIZE/R-CONC/R-V0BLOCKS",
    ),
    Marker(
        "R-CAPTURE",
        _re(
            r"(?:^Compile and warming up model for size|Capturing CUDA graphs?|^Capturing (?:cudagraphs|the model for CUDA graphs)|^Graph capturing finished in|^CUDA graph pool memory:|^Free memory on device \([\d.]+/[\d.]+ GiB\) on startup\. Desired)"
        ),
        "cudagraph_capture",
        "cudagraph_capture",
        "Graph capturing finished in 12 secs, took 0.87 GiB",
        f"{V} §2.3 R-WARMSIZE/R-CAPBAR/R-CAPDONE/R-BREAKDOWN",
    ),
    Marker(
        "R-INITDONE",
        _re(r"^init engine \(profile, create kv cache, warmup model\) took"),
        "cudagraph_capture",
        "cudagraph_capture",
        "init engine (profile, create kv cache, warmup model) took 37.22 s",
        f"{V} §2.3 R-INITDONE (engine warm; API server not up yet)",
    ),
    Marker(
        "R-READY",
        _re(r"^(?:Starting vLLM (?:API )?server(?: \d+)? on|Application startup complete)"),
        "ready",
        "serving",
        "Application startup complete.",
        f"{V} §2.3 R-INITDONE/R-SERVER/R-UVI-READY",
    ),
    Marker(
        "R-SERVE",
        _re(
            r"^(?:(?:Engine \d{3}|\d+ Engines Aggregated): Avg prompt throughput|Avg prompt throughput: [\d.]+ tokens/s|Added request|Received request)"
        ),
        "serving",
        "serving",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
        f"{V} §2.3 R-STATS-HEAD",
    ),
)

# A worker that dies before any weight-loading marker died in device or distributed init.
WORKER_START = _re(r"WorkerProc failed to start|WorkerProc initialization failed")
# A startup marker after ready means a new start in the same log.
RESTART_MARKERS = frozenset({"R-VER", "R-LOGO", "R-ARGS"})

_OOM_CTX = None  # phase from frames and markers
FAILURES: tuple[Failure, ...] = (
    # --- memory: the plan did not fit
    Failure(
        "E-LOADOOM",
        _re(r"Failed to load model - not enough (?:GPU )?memory"),
        "oom",
        "weight_loading",
        True,
        95,
        "ran out of device memory while loading weights",
        "Failed to load model - not enough GPU memory. Try lowering",
        f"{V} §3 E-LOADOOM",
    ),
    Failure(
        "E-WARMOOM",
        _re(r"out of memory occurred when warming up (?:sampler|pooler)"),
        "oom",
        "memory_profiling",
        True,
        95,
        "ran out of memory in the sampler warm-up (logits for max_num_seqs dummy requests)",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests.",
        f"{V} §3 E-WARMOOM; corpus convention: sampler warm-up is memory_profiling",
    ),
    Failure(
        "E-MAXLEN",
        _re(
            r"To serve at least one request with the models?'s max seq len|The model's max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"
        ),
        "kv",
        "kv_cache_allocation",
        True,
        92,
        "one request of max_model_len does not fit the KV cache",
        "ValueError: To serve at least one request with the model's max seq len (4096), (0.14 GiB KV cache is needed, which is larger than the available KV cache memory (0.09 GiB).",
        f"{V} §3 E-MAXLEN/E-MAXLEN-V0",
    ),
    Failure(
        "E-NOKV",
        _re(
            r"No available memory for the cache blocks|Cannot auto-fit max_model_len|left no memory for the KV cache|on kv cache allocation is less than requested memory for kv"
        ),
        "kv",
        "kv_cache_allocation",
        True,
        92,
        "nothing (or too little) was left for the KV cache after weights and activations",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        f"{V} §3 E-NOKV/E-AUTOFIT; {T} §1c, §2, §3a-b",
    ),
    Failure(
        "E-STARTFREE",
        _re(
            r"(?:Free memory on device|Available memory on node \d+)(?: \S+)? \([\d.]+/[\d.]+ GiB\) on startup is less than|Externally held weights on device .* exceed the desired"
        ),
        "budget",
        "environment",
        True,
        90,
        "free memory at startup is below the requested budget (gpu_memory_utilization x total): other processes hold memory or the fraction is too high",
        "ValueError: Free memory on device cuda:0 (30.1/79.19 GiB) on startup is less than desired GPU memory utilization (0.92, 72.86 GiB).",
        f"{V} §3 E-STARTFREE; {T} §2",
    ),
    Failure(
        "E-TORCHOOM",
        _re(
            r"(?:OutOfMemoryError|Tried to allocate [\d.]+ [KMGT]iB|(?:CUDA|HIP|XPU|MPS) out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDA driver error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY)"
        ),
        "oom",
        _OOM_CTX,
        True,
        80,
        "the device ran out of memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 79.19 GiB",
        f"{V} §3 E-TORCHOOM/E-OOMOTHER",
    ),
    Failure(
        "E-CPUALLOC",
        _re(
            r"DefaultCPUAllocator: can't allocate memory|MemoryError|Cannot allocate memory|unable to mmap \d+ bytes|std::bad_alloc"
        ),
        "oom_host",
        _OOM_CTX,
        True,
        79,
        "host memory allocation failed",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 46137344 bytes.",
        f"{T} §3c",
    ),
    Failure(
        "E-KILLED",
        _re(
            r"exit code:? 137|exit code: -9\b|Failed core proc\(s\): \{[^}]*: -9[,}]|\(SIGKILL\)|OOMKilled|Out of memory: Killed process|oom-kill|oom_reaper|^Killed$|running low on memory|ray-oom-prevention|exceeds the memory usage threshold"
        ),
        "oom_host",
        _OOM_CTX,
        True,
        79,
        "a process was SIGKILLed (exit 137/-9): the usual signature of the kernel's host-RAM OOM killer",
        "The Python process exited with exit code 137 (SIGKILL). This may have been cause by OOM error.",
        f"{T} §9 (exit code -9 = SIGKILL); kernel/k8s OOM-killer wording",
    ),
    Failure(
        "E-SWAP",
        _re(r"Aborted due to the lack of CPU swap space"),
        "oom",
        "serving_decode",
        True,
        85,
        "preempted sequences were swapped out and vLLM's CPU swap pool overflowed (running sequences grew during decode)",
        "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space",
        "vLLM V0 scheduler (_preempt_by_swap)",
    ),
    # --- not memory: environment, network, timeouts, crashes, configuration
    Failure(
        "E-NCCL",
        _re(
            r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError|ncclInvalidUsage|NCCL WARN|DistBackendError|DistNetworkError|Watchdog caught collective operation timeout|Gloo connectFullMesh failed|mlx5dv_reg_dmabuf_mr|ibv_(?:reg_mr|create_qp|modify_qp)|Failed to load NCCL library|The client socket has (?:failed to connect|timed out)|TCPStore.*(?:timed out|refused)|DistStoreError|Timed out waiting \d+ms for (?:send|recv) operation|Connection closed by peer \[\d"
        ),
        "network",
        "network_communication",
        False,
        78,
        "collective communication failed (NCCL/Gloo/RDMA): not a capacity problem",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
        f"{V} §3 E-NCCL/E-NCCLWD; recipe note on mlx5dv_reg_dmabuf_mr",
        excludes=("E-CPUALLOC",),
    ),  # "ibv_reg_mr failed: Cannot allocate memory" is pinned memory (memlock), not host RAM
    Failure(
        "E-ENV",
        _re(
            r"cudaGetDeviceCount|Error 80[0-9]\b|forward compatibility was attempted|system not yet initialized|CUDA driver version is insufficient|NVIDIA driver on your system is too old|no kernel image is available for execution|No CUDA GPUs are available|Failed to infer device type|libcuda\.so|undefined symbol|GLIBC_\d|Failed to initialize NVML|NVML Shared Library Not Found|Driver/library version mismatch|[Ff]abric ?[Mm]anager|No package metadata was found for vllm|[Aa]ddress already in use|requires (?:a GPU with )?compute capability|not supported on (?:this|your) (?:GPU|device|platform)|ModuleNotFoundError: No module named|ImportError: |compute capability (?:below|of at least|>=)|only supports? (?:Ampere|Hopper)|HIP error: invalid device function|'_OpNamespace' '_C' object has no attribute|Torch not compiled with CUDA enabled|Too large swap space"
        ),
        "environment",
        "environment",
        False,
        70,
        "the software/driver stack or the host setup is wrong (driver, CUDA build, missing module, port)",
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility was attempted on non supported HW",
        "vLLM/torch/CUDA error texts; recipe requirements (CUDA 13, driver r580+)",
    ),
    Failure(
        "E-SIGILL",
        _re(r"died unexpectedly \(exit code: -4\)|exit code -4\b|Illegal instruction|\bSIGILL\b"),
        "environment",
        "environment",
        False,
        71,
        "a process died of an illegal instruction (SIGILL): the vLLM/torch build uses CPU instructions this host "
        "does not execute (a build for another CPU, or a VM whose CPU features changed)",
        "Worker proc VllmWorker-0 died unexpectedly (exit code: -4), shutting down executor.",
        "vllm/v1/executor/multiproc_executor.py (worker monitor); signal 4 is SIGILL (signal(7))",
    ),
    Failure(
        "E-READY",
        _re(
            r"Timed out waiting for (?:new )?engine core processes to start|Timed out waiting for engines to send ?initial message|Timed out waiting for READY|Did not receive response from front-end process within|Engine core .* did not become ready|TimeoutError: Timed out"
        ),
        "timeout",
        "timeout",
        False,
        65,
        "the engine did not become ready in time",
        "TimeoutError: Timed out waiting for engine core processes to start.",
        f"{V} §3 E-READY",
    ),
    Failure(
        "E-RPCTIMEOUT",
        _re(
            r"RPC call to \w+ timed out|TimeoutError: Server didn't reply within|RayChannelTimeoutError|^TimeoutError$"
        ),
        "timeout",
        "timeout",
        False,
        64,
        "a worker stopped answering (hang): a call to it timed out; a hang, at start-up or while serving, not memory",
        "TimeoutError: RPC call to execute_model timed out.",
        f"{V} §3 E-RPCTIMEOUT",
    ),
    Failure(
        "E-ITERTIMEOUT",
        _re(r"Engine iteration timed out|Engine loop has died"),
        "timeout",
        "timeout",
        False,
        64,
        "an engine step hung past ENGINE_ITERATION_TIMEOUT_S while serving: a stall, not memory",
        "RuntimeError: Engine iteration timed out. This should never happen!",
        "vllm/engine/async_llm_engine.py (V0): run_engine_loop raises it when a step exceeds ENGINE_ITERATION_TIMEOUT_S",
    ),
    Failure(
        "E-PLACEMENT",
        _re(r"Waiting for creating a placement group of specs for \d+ seconds"),
        "stall",
        "network_communication",
        False,
        50,
        "Ray cannot place the workers: the cluster lacks the GPUs asked for, or its nodes do not see each other",
        "Waiting for creating a placement group of specs for 70 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}].",
        "vllm/executor/ray_utils.py (_wait_until_pg_ready): logs this every wait while the group is pending",
    ),
    Failure(
        "E-CORE-WAIT",
        _re(
            r"Waiting for \d+ local, \d+ remote core engine proc\(s\) to start|No available shared memory broadcast block found in \d+ seconds?"
        ),
        "stall",
        "timeout",
        False,
        50,
        "the engine stopped making progress: the API server waits for the engine core, or the engine core waits for a worker",
        "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging.",
        "vllm/v1/engine/utils.py (wait_for_engine_startup); vllm/distributed/device_communicators/shm_broadcast.py (acquire_write/read)",
    ),
    Failure(
        "E-CAPTURE",
        _re(
            r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w*|previous error during capture|only supports decode-only full CUDAGraph capture"
        ),
        "crash",
        "cudagraph_capture",
        False,
        62,
        "CUDA-graph capture failed (not a memory error)",
        "RuntimeError: CUDA error: operation not permitted when stream is capturing",
        f"{V} §3 E-CAPTURE",
    ),
    Failure(
        "E-ILLEGAL",
        _re(
            r"illegal memory access|device-side assert(?:ion)? triggered|misaligned address|CUBLAS_STATUS_EXECUTION_FAILED|Segmentation fault|core dumped|unspecified launch failure"
        ),
        "crash",
        "not_oom_other",
        False,
        68,
        "a kernel crashed (illegal memory access/assert/segfault): a bug or bad build, not a lack of memory",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA runtime error texts; hard negative of the method",
    ),
    Failure(
        "E-PROFASSERT",
        _re(r"Error in memory profiling\. Initial free memory"),
        "crash",
        "memory_profiling",
        False,
        66,
        "another process changed GPU memory while vLLM profiled",
        "AssertionError: Error in memory profiling. Initial free memory 70.1 GiB, current free memory 75.2 GiB.",
        f"{V} §3 E-PROFASSERT",
    ),
    Failure(
        "E-COMPILE",
        _re(
            r"torch\._dynamo\.exc\.\w+|InductorError|BackendCompilerFailed|backend compilation occurred during the initial profiling run"
        ),
        "crash",
        "not_oom_other",
        False,
        55,
        "torch.compile failed",
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
        f"{V} §3 E-COMPILE",
    ),
    Failure(
        "E-WEIGHTFILES",
        _re(
            r"Cannot find any model weights|SafetensorError|Error while deserializing header|No such file or directory: '[^']*\.safetensors'|ValueError: No supported weights? (?:files? )?found"
        ),
        "config",
        "weight_loading",
        False,
        56,
        "the weight files are missing, of another format than asked for, or corrupt",
        "RuntimeError: Cannot find any model weights with `/models/vicuna-13b`",
        "vllm/model_executor/model_loader/default_loader.py (_prepare_weights); safetensors' deserialising errors",
    ),
    Failure(
        "E-CONFIG",
        _re(
            r"User-specified max_model_len \(\d+\) is greater than the derived|prefix_cache_retention_interval .*(?:is set but|must be)|--mamba-block-size can only be set|tool choice requires --enable-auto-tool-choice|--enable-auto-tool-choice requires tool_parser|unrecognized arguments:|error: argument |pydantic_core\._pydantic_core\.ValidationError|ValidationError: \d+ validation error"
        ),
        "config",
        "not_oom_other",
        False,
        50,
        "vLLM rejected its configuration at startup",
        "ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len",
        f"{V} §3 E-DERIVEDLEN/E-TOOLCFG; {T} §5-6",
    ),
    # --- serving signals (not fatal by themselves)
    Failure(
        "E-PREEMPT",
        _re(
            r"is preempted (?:by|in) PreemptionMode|exceeds the capacity of block_manager|not enough KV cache space|Preempted request \S+ has been resumed"
        ),
        "pressure",
        "cache_pressure",
        False,
        30,
        "requests were preempted or refused because the KV cache was full",
        "Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        f"{V} §3 E-PREEMPT-V0; V0 scheduler",
    ),
    Failure(
        "E-REQLEN",
        _re(r"This model's maximum context length is \d+ tokens|is longer than the maximum model length of \d+"),
        "request",
        "not_oom_other",
        False,
        20,
        "a request was longer than max_model_len (a token-budget setting, not a full cache)",
        "This model's maximum context length is 1024 tokens. However, you requested 2000 tokens",
        f"{V} §3 E-REQLEN",
    ),
    # --- wrappers: something fatal happened; the cause is above
    Failure(
        "E-DIED",
        _re(
            r"engine core exited unexpectedly|Worker proc \S+ died unexpectedly|Engine core proc \S+ died unexpectedly"
        ),
        "died",
        None,
        False,
        12,
        "an engine process vanished (killed from outside or crashed in native code)",
        "Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor.",
        f"{V} §3 E-WORKERDIED; {T} §9",
    ),
    Failure(
        "E-WRAP",
        _re(
            r"Engine core initialization failed|EngineCore failed to start|WorkerProc failed to start|WorkerProc initialization failed|WorkerProc hit an exception|EngineCore encountered a fatal error|EngineCore hit an exception|EngineDeadError|AsyncLLM output_handler failed|Engine background task failed|Engine process failed to start|Worker failed with error"
        ),
        "wrapper",
        None,
        False,
        10,
        "the engine died",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        f"{V} §3 wrappers",
    ),
    Failure(
        "E-EXC",
        _re(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::|$)"),
        "exception",
        None,
        False,
        5,
        "an exception was raised",
        "ValueError: max() arg is an empty sequence",
        "Python traceback last line",
    ),
)

# Not scanned per line: the engine adds this hit when the log ends inside a traceback, before its
# exception line (an excerpt cut short, or a process killed while printing). Placed by its frames.
CUT_TRACEBACK = Failure(
    "E-CUT",
    _re(r"Traceback \(most recent call last\)"),
    "wrapper",
    None,
    False,
    9,
    "a traceback the log cuts off before its exception line",
    "Traceback (most recent call last):",
    "Python traceback header; the exception line would follow the frames",
)

SHUTDOWN = _re(
    r"\[shutdown\] API server: shutdown triggered|^Shutting down$|Received SIGTERM|received signal|KeyboardInterrupt|shutdown triggered|Terminated$"
)

# Lines that look like errors in every healthy run, or per-request errors that do not fail the
# deployment (a tool parser failing on a random model's text). Matched on the vLLM source file.
BENIGN_SOURCES = _re(r"tool_parser|reasoning_parser|serving_chat|serving\.py|api_utils|system_utils")
# A step that ran longer than vLLM's default readiness timeout (VLLM_ENGINE_READY_TIMEOUT_S=600).
SLOW_STEP = _re(r"(?:takes|took) (?P<s>[\d.]+) s(?:econds)?(?: in total)?\b")
READY_TIMEOUT_S = 600.0

# Traceback frames → phase. The innermost startup frame wins; a serving frame counts only when no
# startup frame is in the same traceback (V0's profile_run calls execute_model).
FRAME = _re(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)')
FRAME_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_re(r"capture_model|capture_end|_capture_cudagraph|cudagraph|CUDAGraph|graph_capture"), "cudagraph_capture"),
    (_re(r"_dummy_sampler_run|_dummy_pooler_run"), "memory_profiling"),
    (
        _re(
            r"initialize_kv_cache|allocate_kv_cache|_allocate_kv_cache|init_kv_cache|initialize_cache|_init_cache|_reshape_kv_cache|bind_kv_cache|initialize_from_config"
        ),
        "kv_cache_allocation",
    ),
    (
        _re(r"determine_available_memory|determine_num_available_blocks|profile_run|_dummy_run|memory_profiling"),
        "memory_profiling",
    ),
    (
        _re(
            r"load_model|load_weights|model_loader|weights_iterator|initialize_model|_initialize_model|load_state_dict|safe_open"
        ),
        "weight_loading",
    ),
    (
        _re(r"init_device|init_worker_distributed_environment|initialize_model_parallel|init_distributed"),
        "distributed_init",
    ),
)
SERVING_FRAME = _re(
    r"execute_model|run_busy_loop|_process_engine_step|step_with_batch_queue|sample_tokens|^step$|generate|_run_engine"
)
# Messages only vLLM's model-execution path prints (V0 dumps the failed batch's input): serving.
SERVING_MESSAGE = _re(r"Error in model execution|Writing input of failed execution|Dumping input data for V1")
PREFILL_FRAME = _re(r"prompt_logprobs|_prepare_prompt|_get_prompt_logprob|prefill")
DECODE_FRAME = _re(r"_prepare_decode|swap_out|_preempt_by_swap|decode")


def gate(patterns: list[re.Pattern[str]]) -> re.Pattern[str]:
    """One alternation of many patterns (named groups dropped): a line that fails it fails them all,
    so most candidate lines cost one search instead of dozens."""
    return re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[A-Za-z_][A-Za-z0-9_]*>', '(?:', p.pattern)})" for p in patterns))


MARKER_GATE = gate([m.pattern for m in MARKERS] + [SHUTDOWN, SLOW_STEP])
FAILURE_GATE = gate([f.pattern for f in FAILURES])
