"""What to do next, by failure phase: the method's order of checks, as data."""

from __future__ import annotations

ADVICE: dict[str, tuple[str, ...]] = {
    "environment": (
        "Fix the environment before touching capacity: compare image, vLLM version, CUDA build (13 for current recipes) and driver (r580+) with the recipe (`oomkit env --recipe`).",
        "If free memory at startup was below the budget: look for leftover vLLM workers or other processes on the GPU (`nvidia-smi`), or lower --gpu-memory-utilization (it is a fraction of total memory, not of free memory).",
        "Do not lower max_num_seqs or disable prefix caching for this: it is not a serving-load problem.",
    ),
    "network_communication": (
        "This is not an out-of-memory: fixing it adds no capacity and lowering concurrency will not help.",
        "Check NCCL/RDMA: NCCL_DEBUG=INFO, /dev/shm size (--ipc=host or --shm-size), NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME/VLLM_HOST_IP for multi-node, NCCL_DMABUF_ENABLE=0 for mlx5dv_reg_dmabuf_mr errors, and the all-to-all backend the recipe names.",
    ),
    "weight_loading": (
        "Do not start by lowering max_num_seqs or disabling prefix caching: the weights themselves did not fit.",
        "Check image, CUDA 13 build and driver first (`oomkit env --recipe`), then weights per GPU against capacity (`oomkit plan --model M --gpu G --gpus N`): change topology (more TP/EP/PP, a quantized checkpoint) or expand.",
        'If another process held memory ("Process N has X GiB in use"), free the GPU first.',
        "A host-RAM kill (exit 137/-9) during loading is not a GPU OOM: give the container more RAM or load with fewer parallel readers.",
    ),
    "memory_profiling": (
        "The profiling forward pass (max_num_batched_tokens tokens, sampler for max_num_seqs) did not fit next to the weights: lower --max-num-batched-tokens, or --max-num-seqs for sampler warm-up OOMs, or lower --gpu-memory-utilization if CUDA graphs are not charged in this version.",
        "If weights already take most of the GPU, this is a topology question (`oomkit plan`): the runtime needs headroom beyond the weights.",
    ),
    "kv_cache_allocation": (
        "Compare max_model_len with the KV pool: vLLM's own estimated maximum length is quoted above; lower --max-model-len to it, or raise --gpu-memory-utilization, use fp8 KV (--kv-cache-dtype fp8), or add GPUs (`oomkit plan --compare`).",
        "A negative KV figure means weights plus runtime already exceed the budget: that is a cannot-load verdict, not a context-length one.",
        "Do not lower max_num_seqs for this: one request of max_model_len must fit.",
    ),
    "cudagraph_capture": (
        "CUDA-graph capture ran out of the margin left above the KV cache: lower --gpu-memory-utilization a little (0.01-0.03), capture fewer sizes (--max-cudagraph-capture-size / cudagraph_capture_sizes), or try --enforce-eager to confirm.",
        "If the version does not charge graph memory before KV sizing (<0.20), the margin must be left by hand.",
    ),
    "timeout": (
        "Startup took longer than a readiness deadline: raise VLLM_ENGINE_READY_TIMEOUT_S (the K3 recipe sets 3600) or the orchestrator's probe, reuse the torch.compile cache, or test with --enforce-eager.",
        "Check that the weights are complete on disk and that every rank progresses (a stuck rank is a network or environment problem).",
        "If it stalled while serving (the server was ready): this is not an out-of-memory; take a stack of the stuck engine core (`py-spy dump --pid PID`), check that no rank stopped (NCCL_DEBUG=INFO), and report it with this triage: raising a timeout only delays the failure.",
    ),
    "serving_prefill": (
        "Lower concurrency first (--max-num-seqs or the client's parallel requests) and re-measure with the same request set (`oomkit ladder`).",
        "Then look at prompt size: history and tool descriptions, chunked prefill (--max-num-batched-tokens), prompt_logprobs; then prefix-cache retention.",
        "Keep prefix caching on unless a hit-rate comparison says otherwise (`oomkit compare`).",
    ),
    "serving_decode": (
        "Lower concurrency first and re-measure with the same request set (`oomkit ladder`); decode grows every running sequence's KV.",
        "Then shorten history/output length, then prefix-cache retention; expand if the headroom at the target is below the reserve (`oomkit decide`).",
    ),
    "cache_pressure": (
        "The KV cache is the limit (full cache, waiting queue, preemptions): lower concurrency to the knee or add KV capacity (fp8 KV, more GPUs); measure the knee with `oomkit ladder`.",
        "Keep prefix caching on unless a hit-rate comparison says otherwise; compare retention modes with `oomkit compare --preset cache-vs-context`.",
    ),
    "not_oom_other": (
        "This failure is not an out-of-memory: capacity changes will not fix it.",
        "Read the exception quoted above; for illegal memory access or asserts, try the recipe's image/version and report the bug with this triage.",
        "A request longer than max_model_len is a token-budget setting: raise --max-model-len only if the KV pool allows (`oomkit plan`), or cut the prompt.",
    ),
    "healthy": (
        "The server started and no failure was logged. Next: measure with the fixed request set (`oomkit ladder`).",
    ),
    "unknown": (
        "oomkit could not place this log in a phase. Give it the whole server log (all ranks: a folder works), from the first line to the end.",
    ),
}


def advice_for(phase: str) -> tuple[str, ...]:
    return ADVICE.get(phase, ADVICE["unknown"])
