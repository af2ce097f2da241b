"""Failure signatures of memory: the plan did not fit (device, KV cache, budget, host RAM)."""

from __future__ import annotations

from oomkit.triage.rules import Failure, T, V, rx

_OOM_CTX = None  # phase from frames and markers
MEMORY_FAILURES: tuple[Failure, ...] = (
    Failure(
        "E-LOADOOM",
        # a paste or an editor may set the dash as an en or em dash
        rx(r"Failed to load model [-\u2013\u2014] not enough (?:GPU )?memory"),
        "oom",
        "weight_loading",
        True,
        95,
        "ran out of device memory while loading weights",
        "Failed to load model - not enough GPU memory. Try lowering",
        f"{V} §3 E-LOADOOM",
    ),
    Failure(
        "E-WEIGHTALLOC",
        rx(r"Failed to create unquantized linear weights"),
        "oom",
        "weight_loading",
        True,
        95,
        "ran out of device memory creating the model's weight tensors (model construction, before reading them)",
        "RuntimeError: Failed to create unquantized linear weights. This may be caused by insufficient memory "
        "to allocate the weight.",
        "UnquantizedLinearMethod.create_weights as patched by RL frameworks around vLLM (logger.error + RuntimeError "
        "around torch.empty, catching torch.cuda.OutOfMemoryError); issue 13 names it among the misses",
    ),
    Failure(
        "E-WARMOOM",
        rx(r"out of memory occurred when warming up (?:sampler|pooler)"),
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
        rx(
            # (a retyped or cut paste keeps less: "The model’s max sew len (32768) is larger than ...", a line that
            # stops at "ValueError: To serve at least one"; the rest of each wording is this check's alone)
            r"To serve at least one(?: request with the models?.s max seq len|\s*$)"
            r"|\bis larger than the maximum number of tokens that can be stored in KV cache"
            # the same check's figures quoted alone, or as a wrapper words them ("1.75 GiB KV cache is needed, available
            # 0.13 GiB")
            r"|\b[\d.]+ GiB KV cache is needed\b"
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
        "E-PROMPTCAP",
        # V0's scheduler (vllm/core/scheduler.py _schedule_prefills, 0.2-0.10): BlockSpaceManager.can_allocate answers
        # AllocStatus.NEVER when a prompt needs more blocks than the whole GPU pool holds, and the request is ignored.
        # The pool is smaller than one request: capacity, which V1 refuses at start-up instead (E-MAXLEN).
        rx(r"exceeds the capacity of block_manager"),
        "kv",
        "kv_cache_allocation",
        # the server goes on serving other requests: the corpus's labellers file it not OOM (2 of 2 dev cases)
        False,
        50,  # the lowest fatal rank: the request is lost; any crash in the same log ranks above it
        "a prompt needs more KV blocks than the whole pool holds, so the scheduler ignores it: the KV cache is too "
        "small for one request of that length",
        "WARNING 12-19 10:21:05 scheduler.py:161] Input prompt (1217 tokens) is too long and exceeds the capacity of "
        "block_manager",
        "vllm/core/scheduler.py (_schedule_prefills: can_allocate == AllocStatus.NEVER), vLLM 0.2-0.10",
    ),
    Failure(
        "E-MAMBABLOCKS",
        rx(r"max_num_seqs \(\d+\) exceeds available Mamba cache blocks"),
        "kv",
        "kv_cache_allocation",
        # the pool holds fewer Mamba states than max_num_seqs asks graphs for: a setting to lower (vLLM names the
        # bound), as the corpus's labellers file it (4 of 6 dev cases not OOM), unlike a pool too small for one request
        False,
        92,
        "the KV pool holds fewer Mamba state blocks than max_num_seqs: lower max_num_seqs to the bound vLLM names",
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (969). Each decode sequence requires "
        "one Mamba cache block, so CUDA graph capture cannot proceed.",
        "vllm/config/compilation.py (CompilationConfig.resolve_cudagraph_mode_and_sizes)",
    ),
    Failure(
        "E-NOKV",
        rx(
            r"No available memory for the cache blocks|Cannot auto-fit max_model_len|left no memory for the KV cache|on kv cache allocation is less than requested memory for kv"
            # a platform plugin's wording of the same check (vllm-metal: "Paged attention: not enough Metal memory for
            # KV cache.")
            r"|not enough \w+ memory for (?:the )?KV cache"
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
        rx(
            # (a pasted line may wrap right after "less": the message is long)
            r"(?:Free memory on device|Available memory on node \d+)(?: \S+)? \([\d.]+/[\d.]+ GiB\) on startup is less(?: than|\s*$)|Externally held weights on device .* exceed the desired"
            # the shorter wording of vLLM 0.19-0.28: "Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization
            # (0.35, 42.57 GiB)", "Free memory (31.73 GiB) < desired utilization (125.83 GiB)"
            r"|Free memory(?: on \S+)? \((?:[\d.]+/)?[\d.]+ ?GiB\) < desired utilization"
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
        rx(
            r"(?:OutOfMemoryError|Tried to allocate [\d.]+ [KMGT]iB|(?:CUDA|HIP|XPU|MPS|NPU) out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDA driver error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY)"
            # XLA's status for device memory (TPU: torch_xla and JAX): "RESOURCE_EXHAUSTED: Error allocating
            # device buffer: Attempting to allocate 1.2G. That was not possible." (and "Error loading program").
            r"|RESOURCE_EXHAUSTED: .{0,200}?(?:That was not possible|[Oo]ut of memory)"
            # XLA's TPU compiler when a kernel's scoped memory does not fit ("E1001: CompileTimeScopedVmemOom",
            # "CompileTimeHbmOom"), and Tenstorrent tt-metal's allocator (bank_manager.cpp: "Out of Memory: Not
            # enough space to allocate 268435456 B DRAM buffer across 12 banks")
            r"|RESOURCE_EXHAUSTED: .{0,80}?CompileTime\w*Oom\b|Out of Memory: Not enough space to allocate \d+ B \w+ buffer"
            # PyTorch's caching allocator, when cudaMalloc fails where NVML cannot be queried (MIG slices,
            # containers, Jetson), trips its own assert in the out-of-memory path instead of raising the OOM
            # (pytorch/pytorch#112377, #185240): "NVML_SUCCESS == r INTERNAL ASSERT FAILED at
            # ".../CUDACachingAllocator.cpp":1131". Not the nvmlInit_v2_() assert, which fails at start.
            r"|NVML_SUCCESS == r INTERNAL ASSERT FAILED"
            # the caching allocator's warning when an allocation fails with OOM (c10/cuda/CUDACachingAllocator.cpp:
            # "memory allocation failed with OOM on device 0 while trying to allocate N bytes (free: F, total: T)"), and
            # its expandable segments' twin when mapping more physical memory into a segment fails ("expandable_segments:
            # memory mapping failed with OOM on device 0 while trying to map 20971520 bytes (free: ..., total: ...)")
            r"|memory (?:allocation|mapping) failed with OOM on device \d+"
            # Intel Gaudi's PyTorch bridge when the device workspace cannot be allocated (synapse_helpers:
            # PT_SYNHELPER_FATAL("workspace Allocation of size ::", size, " failed!"))
            r"|workspace Allocation of size ::\d+ failed"
            # vLLM's own allocator for sleep mode (csrc/cumem_allocator.cpp, CUDA_CHECK of cuMemCreate/cuMemMap):
            # "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
            r"|CUDA Error: out of memory at \S*cumem_allocator"
            # the NVIDIA kernel driver's own status for a failed allocation (NVRM in the kernel log; NV_ERR_NO_MEMORY in
            # open-gpu-kernel-modules' nvstatuscodes), which unified-memory systems (GH200, GB10) print when the
            # memory the GPU and the host share is exhausted
            r"|\[NV_ERR_NO_MEMORY\]"
            # Ascend CANN's error code for a failed device allocation (rtMalloc), which torch_npu prints above its
            # own "ERR00100 PTA call acl api failed" ("Memory_Allocation_Failure(EL0004): Failed to allocate memory")
            r"|Memory_Allocation_Failure\(EL0004\)"
            # Apple's Metal when a command buffer fails for lack of GPU memory, as MLX (vllm-metal's array library)
            # raises it: "[METAL] Command buffer execution failed: Insufficient Memory
            # (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"
            r"|Command buffer execution failed: Insufficient Memory|kIOGPUCommandBufferCallbackErrorOutOfMemory"
        ),
        "oom",
        _OOM_CTX,
        True,
        80,
        "the device ran out of memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 79.19 GiB",
        f"{V} §3 E-TORCHOOM/E-OOMOTHER; torch_npu (vllm-ascend) 'NPU out of memory'; XLA RESOURCE_EXHAUSTED "
        "(tensorflow/compiler/xla: 'Attempting to allocate/reserve ... That was not possible'; TPU compile-time "
        "'CompileTimeScopedVmemOom'); MLX on Apple Metal ('Command buffer execution failed: Insufficient Memory'); tt-metal tt_metal/impl/allocator/bank_manager.cpp ('Out of Memory: Not enough "
        "space to allocate'); PyTorch's allocator's NVML assert on its OOM path (pytorch/pytorch#112377, #185240; "
        "fal-ai/fal#478); the NVIDIA driver's NV_ERR_NO_MEMORY (open-gpu-kernel-modules src/common/sdk/nvidia/inc/"
        "nvstatuscodes.h); Ascend CANN's EL0004 Memory_Allocation_Failure",
    ),
    Failure(
        "E-CPUALLOC",
        rx(
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
        rx(
            r"exit code:? 137|exit code: -9\b|Failed core proc\(s\): \{[^}]*: -9[,}]|\(SIGKILL\)|OOMKilled(?!\"?\s*[:=]\s*\"?false)|[Oo]ut of memory: Killed process|oom-kill|oom_reaper|^Killed$|running low on memory|ray-oom-prevention|exceeds the memory usage threshold"
            # Slurm's cgroup plugin and srun reporting a job step's task killed for its memory limit ("slurmstepd:
            # error: Detected 1 oom_kill event in StepId=26161866.0", "srun: error: node-01: task 0: Out Of Memory")
            r"|Detected \d+ oom_kill events? in StepId|srun: error: \S+: tasks? [\d,-]+: Out Of Memory"
            # the kernel's OOM-kill report without its first line (mm/oom_kill.c: "Killed process N (python3)
            # total-vm:...kB, anon-rss:...kB, file-rss:...kB, shmem-rss:...kB"; "oom-kill:constraint=CONSTRAINT_MEMCG")
            r"|\banon-rss: ?\d+ ?kB\b|\bCONSTRAINT_MEMCG\b"
        ),
        "oom_host",
        _OOM_CTX,
        True,
        79,
        "a process was SIGKILLed (exit 137/-9): the usual signature of the kernel's host-RAM OOM killer",
        "The Python process exited with exit code 137 (SIGKILL). This may have been cause by OOM error.",
        f"{T} §9 (exit code -9 = SIGKILL); kernel/k8s OOM-killer wording; Slurm's task/cgroup plugin and srun",
    ),
    Failure(
        "E-SWAP",
        rx(r"Aborted due to the lack of CPU swap space"),
        "oom",
        "serving_decode",
        True,
        85,
        "preempted sequences were swapped out and vLLM's CPU swap pool overflowed (running sequences grew during decode)",
        "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space",
        "vLLM V0 scheduler (_preempt_by_swap)",
    ),
)
