"""Failure signatures that are not memory (network, timeouts, crashes, configuration), the serving signals, and the
wrappers; `FAILURES` is every signature in match order, the memory ones first (`failures_memory.py`), then the
network's (`failures_network.py`), then the environment's (`failures_environment.py`), then the readiness checks
outside vLLM (`failures_readiness.py`); the checkpoint and configuration refusals (`failures_settings.py`) are
spliced in after the compile failures; the hits the engine adds itself, not per line, are in `failures_added.py`."""

from __future__ import annotations

from oomkit.triage.failures_environment import ENVIRONMENT_FAILURES
from oomkit.triage.failures_memory import MEMORY_FAILURES
from oomkit.triage.failures_network import NETWORK_FAILURES
from oomkit.triage.failures_readiness import READINESS_FAILURES
from oomkit.triage.failures_settings import SETTINGS_FAILURES
from oomkit.triage.rules import Failure, T, V, gate, rx

FAILURES: tuple[Failure, ...] = (
    *MEMORY_FAILURES,
    # --- not memory: environment, network, timeouts, crashes, configuration
    *NETWORK_FAILURES,
    *ENVIRONMENT_FAILURES,
    *READINESS_FAILURES,
    Failure(
        "E-READY",
        rx(
            r"Timed out waiting for (?:new )?engine core processes to start|Timed out waiting for engines to send ?initial message|Timed out waiting for READY|Did not receive response from front-end process within|Engine core .* did not become ready|TimeoutError: Timed out"
            # vllm-omni's orchestrator giving up on its stages' start (entrypoints/omni.py: "[Orchestrator]
            # Initialization timeout: 0/1 stages ready. Missing stages: [0]")
            r"|Initialization timeout: \d+/\d+ stages ready"
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
        rx(
            r"RPC call to \w+ timed out|TimeoutError: Server didn't reply within|RayChannelTimeoutError"
            r"|^(?:asyncio\.(?:exceptions\.)?|concurrent\.futures\.(?:_base\.)?)?TimeoutError(?::|$)"
            r"|^ray\.exceptions\.GetTimeoutError\b"
        ),
        "timeout",
        "timeout",
        False,
        64,
        "a worker stopped answering (hang): a call to it timed out; a hang, at start-up or while serving, not memory",
        "TimeoutError: RPC call to execute_model timed out.",
        f"{V} §3 E-RPCTIMEOUT; any TimeoutError is a wait that ran out: every `raise TimeoutError` in vLLM "
        "0.6.6-0.34 ends a wait for a worker, an engine, a peer or a server; asyncio's and concurrent.futures' "
        "(Python 3.10 prints asyncio.exceptions.TimeoutError; from 3.11 both are the builtin); Ray's "
        "GetTimeoutError (ray.get past its timeout)",
    ),
    Failure(
        "E-ITERTIMEOUT",
        rx(r"Engine iteration timed out|Engine loop has died"),
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
        rx(r"Waiting for creating a placement group of specs for \d+ seconds"),
        "stall",
        "network_communication",
        False,
        50,
        "Ray cannot place the workers: the cluster lacks the GPUs asked for, or its nodes do not see each other",
        "Waiting for creating a placement group of specs for 70 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}].",
        "vllm/executor/ray_utils.py (_wait_until_pg_ready): logs this every wait while the group is pending",
    ),
    Failure(
        "E-RAYPLACE",
        rx(
            r"No available node types can fulfill resource request"
            r"|Cannot provide a placement group (?:of|requiring)"
            # vLLM's own check of the Ray cluster's GPUs against the world size (initialize_ray_cluster: "in the
            # cluster" in 0.2-0.5, "in the placement group" from 0.6)
            r"|The number of required GPUs exceeds the total number of available GPUs in the (?:cluster|placement group)"
        ),
        "network",
        "network_communication",
        False,
        60,
        "Ray cannot place the workers: no node can hold a requested bundle (a driver node without a GPU is the "
        "environment, E-ENV)",
        "(autoscaler +13s) Error: No available node types can fulfill resource request {'GPU': 1.0}. Add suitable "
        "node types to this cluster to resolve this issue.",
        "Ray autoscaler (infeasible resource request); vllm/executor/ray_utils.py (_wait_until_pg_ready, 0.6-0.10: "
        "the placement-group wait gave up after PG_WAIT_TIMEOUT; initialize_ray_cluster: fewer GPUs than the world size)",
    ),
    Failure(
        "E-RAYWORKER",
        rx(
            r"Failed to register worker (?:\w+ )?to Raylet|Unable to register worker with raylet"
            # a Ray compiled graph's channel between processes or nodes closed under it (Ray's experimental channel
            # code: "ChannelError: Channel closed."), the transport vLLM's Ray executor steps through
            r"|ChannelError: Channel closed"
        ),
        "network",
        "network_communication",
        False,
        60,
        "a Ray worker process could not join its node's raylet: the Ray cluster (its sockets, session folder or "
        "resources), not vLLM",
        "core_worker.cc:496: Failed to register worker to Raylet: IOError: [RayletClient] Unable to register worker "
        "with raylet. Failed to read data from the socket: End of file",
        "Ray src/ray/core_worker/core_worker.cc (CoreWorker: 'Failed to register worker to Raylet'); Ray's compiled-graph "
        "channels (ray/experimental/channel: ChannelError 'Channel closed')",
    ),
    Failure(
        "E-CORE-WAIT",
        rx(
            # (0.9's form without the local/remote split: "Waiting for 1 core engine proc(s) to start: {0}")
            r"Waiting for \d+ (?:local, \d+ remote )?core engine proc\(s\) to start"
            r"|No available (?:shared memory broadcast )?block found in \d+ seconds?"
        ),
        "stall",
        "timeout",
        False,
        50,
        "the engine stopped making progress: the API server waits for the engine core, or the engine core waits for a worker",
        "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging.",
        "vllm/v1/engine/utils.py (wait_for_engine_startup); vllm/distributed/device_communicators/shm_broadcast.py "
        "(acquire_write/read; 0.6-0.7 word it 'No available block found in 60 second.', knowledge rows m01893, m01896)",
    ),
    Failure(
        "E-CAPTURE",
        rx(
            r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w*|previous error during capture|only supports decode-only full CUDAGraph capture"
            r"|dependency created on uncaptured work in another stream|capturing stream has unjoined work"
            r"|would make the legacy stream depend on a capturing blocking stream|would result in a merge of separate capture sequences"
            r"|capture was not ended in the same stream as it began|not permitted on an event last recorded in a capturing stream"
            # PyTorch's copy kernel refusing a synchronising host copy inside a capture (aten/src/ATen/native/cuda/Copy.cu)
            r"|Cannot copy between CPU and CUDA tensors during CUDA graph capture"
            # a graph replayed while another capture is open (aten/src/ATen/cuda/CUDAGraph.cpp replay_prep_kernels:
            # "Cannot prepare for replay during capturing stage.")
            r"|Cannot prepare for replay during capturing stage"
            # Ascend's graph capture (vllm-ascend's ACL graphs): torch_npu's capture_begin failing ("NPU function error:
            # c10_npu::acl::AclmdlRICaptureBegin(...)"), its capture-status assert ("status ==
            # aclmdlRICaptureStatus::ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE INTERNAL ASSERT FAILED") and the CANN runtime's
            # capture-stream errors
            r"|[Aa]clmdlRICapture(?:Begin|End|Status)\b|New capture stream failed|Capture wait event failed"
            r"|rtStreamBeginCapture execution failed|begin capture stream failed"
        ),
        "crash",
        "cudagraph_capture",
        False,
        62,
        "CUDA-graph capture failed (not a memory error)",
        "RuntimeError: CUDA error: operation not permitted when stream is capturing",
        f"{V} §3 E-CAPTURE; the CUDA runtime's cudaGetErrorString() texts of cudaErrorStreamCapture* and "
        "cudaErrorCapturedEvent; aten/src/ATen/native/cuda/Copy.cu (a host copy during capture); "
        "aten/src/ATen/cuda/CUDAGraph.cpp (a replay inside a capture)",
        excludes=("E-NCCL",),
    ),  # NCCL quotes a capture error it met ("NCCL WARN Cuda failure '<text>'"): the capture failed, not the network
    Failure(
        "E-ILLEGAL",
        rx(
            r"illegal memory access|device-side assert(?:ion)? triggered|misaligned address|CUBLAS_STATUS_EXECUTION_FAILED|Segmentation fault|core dumped|unspecified launch failure"
            # a native abort: glibc's assert(), abseil's signal handler (Ray's "*** SIGABRT received at time="), faulthandler
            r"|Assertion `.+' failed\.|\*\*\* SIG(?:ABRT|SEGV|FPE) received at time=|Fatal Python error: (?:Aborted|Segmentation fault)"
            # a CUDA device-side assert as the kernel prints it (backticks lost when pasted as Markdown)
            r"|block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .{1,200}? failed"
            # the kernel's assert with CUDA's own quoting ("Assertion `index < sizes[i]` failed."), found even where
            # interleaved ranks garble the block/thread coordinates before it
            r"|Assertion `.{1,300}?` failed\."
            # the same kernel faults on other accelerators: ROCm's runtime (a kernel touching an unmapped page),
            # Habana's Synapse (a device that stopped making progress), Ascend's CANN (an AI-core kernel fault)
            r"|Memory access fault by GPU node-\d+|Synapse detected a device critical error|aicore execution is abnormal"
            # CANN's device error report of an AI-core or AI-vector kernel fault ("there is an exception of aivec error",
            # "there is an fftsplus aicore error exception") and its out-of-range memory access ("The DDR address of the
            # MTE instruction is out of range"): Ascend's illegal memory access
            r"|there is an? (?:exception of )?(?:fftsplus )?ai(?:core|vec|vector) error|The DDR address of the MTE instruction is out"
            # ROCm's HIP runtime aborting a queue on a kernel's memory fault (rocdevice.cpp callback)
            r"|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"
            # the NVIDIA driver's kernel log for a fault a kernel caused (Xid 13 graphics engine exception, 31 GPU
            # memory page fault, 43 GPU stopped processing; NVIDIA's Xid catalogue), and its MMU fault line
            r"|NVRM: Xid \([^)]*\): (?:13|31|43),|MMU Fault: ENGINE "
            # PyTorch's NCCL watchdog finding a CUDA error on its stream (ProcessGroupNCCL.cpp: "[Rank 7] NCCL watchdog
            # thread terminated with exception: CUDA error: unknown error"): a kernel faulted asynchronously; not memory,
            # and not a capture's refusal, which E-CAPTURE reads
            r"|watchdog thread terminated with exception: CUDA error: (?!out of memory|operation not permitted)"
            r"|CUDA error: an illegal instruction was encountered"
        ),
        "crash",
        "not_oom_other",
        False,
        68,
        "a kernel crashed (illegal memory access/assert/segfault): a bug or bad build, not a lack of memory",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA runtime error texts; hard negative of the method; glibc assert/assert.c; abseil "
        "failure_signal_handler.cc (via Ray); CPython faulthandler; CUDA's device-side assert print "
        "('file.cu:N: func: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.'); ROCR-Runtime "
        "core/runtime/runtime.cpp ('Memory access fault by GPU node-N (Agent handle: ...) on address ... Reason: ...'); "
        "Habana Synapse's device-critical-error notice; Ascend CANN's 'The aicore execution is abnormal'",
    ),
    Failure(
        "E-PROFASSERT",
        rx(r"Error in memory profiling\. Initial free memory"),
        "crash",
        "memory_profiling",
        False,
        66,
        "another process changed GPU memory while vLLM profiled",
        "AssertionError: Error in memory profiling. Initial free memory 70.1 GiB, current free memory 75.2 GiB.",
        f"{V} §3 E-PROFASSERT",
    ),
    Failure(
        "E-MMDUMMY",
        # InputProcessingContext.call_hf_processor (vllm/inputs/registry.py 0.7-0.10, multimodal/processing/context.py
        # since) wraps a Hugging Face processor's failure. An engine that dies of it failed on the dummy multimodal
        # inputs start-up builds to profile the encoder and the batch (MultiModalProfiler, get_dummy_mm_inputs): a
        # request's own input failing while serving is answered 400 by the front end, and the engine serves on.
        rx(r"Failed to apply \w+ on data="),
        "crash",
        "memory_profiling",
        False,
        66,
        "the model's multimodal processor failed on the dummy inputs vLLM builds to profile memory "
        "(its limits per prompt, or a processor from trust_remote_code that does not take them)",
        "RuntimeError: Failed to apply UltravoxProcessor on data={'text': '<|audio|>', 'audios': [array([0., 0.])]}",
        "vllm/inputs/registry.py, vllm/multimodal/processing/context.py (call_hf_processor); "
        "vllm/multimodal/profiling.py, processing/processor.py (get_dummy_mm_inputs)",
    ),
    Failure(
        "E-COMPILE",
        rx(
            r"torch\._dynamo\.exc\.\w+|InductorError|BackendCompilerFailed|backend compilation occurred during the initial profiling run"
            # the last line of every Dynamo error's message (torch/_dynamo/exc.py), also where the exception line is cut
            r"|Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
            # the body of Dynamo's graph-break and unsupported messages (torch/_dynamo/exc.py
            # format_graph_break_message: "Explanation: ...", "Hint: ...", "Developer debug context: ..."), which an
            # excerpt keeps without the first line
            r"|^\s*Explanation: Dynamo |\bDeveloper debug context:"
            # vLLM's own wrapper of a failed Inductor compile (compilation/compiler_interface.py InductorAdaptor.compile,
            # 0.9-0.34), a compiled graph's shape guard (Inductor's assert_size_stride: the graph was compiled for
            # another shape), and a custom op the tracer cannot dispatch (no fake implementation registered)
            r"|vLLM failed to compile the model|expected size \d+==\d+, stride \d+==\d+ at dim="
            r"|Multiple dispatch failed for 'torch\._ops\."
        ),
        "crash",
        "not_oom_other",
        False,
        55,
        "torch.compile failed",
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
        f"{V} §3 E-COMPILE; vllm/compilation/compiler_interface.py (knowledge row m00587); torch/_inductor "
        "assert_size_stride; torch/_subclasses/fake_tensor.py dispatch",
    ),
    *SETTINGS_FAILURES,
    # --- serving signals (not fatal by themselves)
    Failure(
        "E-PREEMPT",
        rx(r"is preempted (?:by|in) PreemptionMode|not enough KV cache space|Preempted request \S+ has been resumed"),
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
        rx(
            r"This model's maximum context length is \d+ tokens|is longer than the maximum model length of \d+"
            r"|Input prompt \(\d+ tokens\) is too long and exceeds limit of \d+"
        ),
        "request",
        "not_oom_other",
        False,
        20,
        "a request was longer than max_model_len (a token-budget setting, not a full cache)",
        "This model's maximum context length is 1024 tokens. However, you requested 2000 tokens",
        f"{V} §3 E-REQLEN; V0 scheduler (_schedule_prefills: prompt over the prompt limit, request ignored)",
    ),
    Failure(
        "E-REQBAD",
        rx(
            # structured output: the grammar matcher refused a token sampled for the request (xgrammar backend's
            # accept_tokens, vllm/v1/structured_output/backend_xgrammar.py, 0.8-0.34)
            r"Failed to advance FSM for request"
            # and the scheduler terminating the request over it (Scheduler.update_from_output, 0.14-0.34: "Unexpected:
            # grammar rejected tokens [200028] for request chatcmpl-... Terminating request.")
            r"|grammar rejected tokens \[[^\]]*\] for request"
            # a multimodal item larger than the encoder cache sized at start-up (vllm/v1/engine/processor.py and
            # input_processor.py _validate_model_input, 0.9-0.34)
            r"|which exceeds the pre-allocated encoder cache size"
        ),
        "request",
        "not_oom_other",
        False,
        20,
        "one request failed on its own content (its grammar or its multimodal input), not on memory",
        "Failed to advance FSM for request cmpl-4eb6-0 for tokens 330. Please file an issue.",
        "vllm/v1/structured_output/backend_xgrammar.py (XgrammarGrammar.accept_tokens); vllm/v1/core/sched/scheduler.py "
        "(update_from_output); vllm/v1/engine/"
        "processor.py, input_processor.py (_validate_model_input: encoder cache size)",
    ),
    Failure(
        "E-HTTPERR",
        # uvicorn's access log, which vLLM's API server keeps at INFO ('10.0.0.8:52596 - "POST /v1/chat/completions
        # HTTP/1.1" 400 Bad Request'): an inference request the server answered with an error status; not 404 or 405, a
        # route the server does not have, which a client calling the wrong URL gets from a healthy server
        # (the status's first digit written as a class, and the protocol's versions spelt out, so that the prefilter
        # keys on ' HTTP/1.1" 4' and ' HTTP/1.1" 5', not on every POST a busy server logs)
        rx(
            r'"POST /(?!\S* HTTP/\S+" 40[45]\b)(?:v1/)?(?:chat/completions|completions|embeddings|score|rerank|pooling'
            r'|classify|responses|audio/(?:transcriptions|translations|speech)|generate|inference/v1/generate)\b[^"]*'
            r' HTTP/(?:1\.1|1\.0|2|2\.0)" [45]\d\d\b'
        ),
        "http",
        "not_oom_other",
        False,
        15,
        "the API server answered an inference request with an error status (the request failed; the engine logged no failure)",
        '10.0.0.8:52596 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
        "uvicorn's access log (uvicorn/protocols/http/h11_impl.py, httptools_impl.py: '%s - \"%s %s HTTP/%s\" %d'), "
        "as vllm/entrypoints/openai/api_server.py runs it",
    ),
    # --- wrappers: something fatal happened; the cause is above
    Failure(
        "E-DIED",
        rx(
            r"engine core exited unexpectedly|Worker proc \S+ died unexpectedly|Engine core proc \S+ died unexpectedly"
            # Ray's raylet on a worker process that exited with WorkerExitType.SYSTEM_ERROR (killed, or a native crash)
            r"|A worker died or was killed while executing a task by an unexpected system error"
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
        rx(
            r"Engine core initialization failed|EngineCore failed to start|WorkerProc failed to start|WorkerProc initialization failed|WorkerProc hit an exception|EngineCore encountered a fatal error|EngineCore hit an exception|EngineDeadError|AsyncLLM output_handler failed|Engine background task failed|Engine process failed to start|Worker failed with error"
            r"|Exception in worker \S+ while processing method"
            # V0's AsyncLLMEngine: asyncio reports the background loop's exception through its done-callback
            r"|Exception in callback functools\.partial\(<function _raise_exception_on_finish"
            # V0's API server when a request finds the engine dead (entrypoints/launcher.py, 0.5-0.10, logger.fatal)
            r"|(?:AsyncLLMEngine|MQLLMEngine) (?:has failed|is already dead), terminating server process"
        ),
        "wrapper",
        None,
        False,
        10,
        "the engine died",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        f"{V} §3 wrappers; V0 vllm/executor/multiproc_worker_utils.py (_run_worker_process: the method a worker "
        "failed in)",
    ),
    Failure(
        "E-FATALSIG",
        rx(r"Got fatal signal from worker processes, shutting down"),
        "wrapper",
        None,
        False,
        10,
        "a worker failed and the engine killed its own process tree (the 'Killed' after it is that kill)",
        "Got fatal signal from worker processes, shutting down. See stack trace above for root cause issue.",
        "vllm/v1/engine/core_client.py (V1 0.7-0.8: the SIGUSR1 handler calls kill_process_tree on itself)",
    ),
    Failure(
        "E-CUDACHECK",
        # c10's C++ trace under a failed CUDA call (c10/cuda/CUDAException.cpp, c10_cuda_check_implementation): a CUDA
        # error was raised; its text is the line above, which an excerpt may have cut. Where the text is kept, its own
        # rule (memory, capture, kernel fault) outranks this one.
        rx(r"Exception raised from c10_cuda_check_implementation at "),
        "wrapper",
        None,
        False,
        10,
        "a CUDA call failed (c10's CUDA check threw); the error's text is above it",
        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent "
        "call first):",
        "PyTorch c10/cuda/CUDAException.cpp (c10_cuda_check_implementation, C10_CUDA_CHECK)",
    ),
    Failure(
        "E-DUMP",
        rx(
            r"Dumping (?:input data for V1 LLM engine|scheduler output for model execution|scheduler stats)"
            r"|Writing input of failed execution to "
        ),
        "dump",
        None,
        False,
        9,
        "a model-execution step raised (vLLM dumped its input); read only when no wrapper or exception line says more",
        "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], ...)",
        "vllm/logging_utils/dump_input.py (dump_engine_exception, called when EngineCore's step raises); V0 0.6: "
        "vllm/worker/model_runner_base.py (dump_input_when_exception around ModelRunner.execute_model)",
    ),
    Failure(
        "E-EXC",
        # also an exception's repr, which V0's multiprocessing engine logs ("NotImplementedError('...')"), and as
        # Triton's Python backend reports a model's failed initialize() (pb_stub.cc "Failed to initialize Python stub"),
        # and as a paste in a Markdown thread may set it, bold or as code ("**ValueError: ...**", "`KeyError: 'x'`")
        rx(
            r"^(?:Failed to initialize Python stub: )?(?:\*\*|`)?(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::|$|\(['\"])"
        ),
        "exception",
        None,
        False,
        5,
        "an exception was raised",
        "ValueError: max() arg is an empty sequence",
        "Python traceback last line",
    ),
)

FAILURE_GATE = gate([f.pattern for f in FAILURES])
