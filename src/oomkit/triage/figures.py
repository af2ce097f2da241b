"""The figures vLLM prints (weights, KV pool, graphs, the OOM line's sizes), as a table of patterns:
named groups become figures; `keep` says which of several values (one per rank) to report."""

from __future__ import annotations

import re
from dataclasses import dataclass

V = "vllm-internals.md §2.3"


@dataclass(frozen=True)
class FigureRule:
    pattern: re.Pattern[str]
    names: dict[str, str]  # group → figure name
    keep: str  # first | last | min | max
    source: str


def _num(text: str) -> float | int:
    text = text.replace(",", "")
    value = float(text)
    return int(value) if re.fullmatch(r"-?\d{1,18}", text) else value  # longer: float (int() of inf fails)


def _gib(value: str, unit: str | None) -> float:
    scale = {"KiB": 1 / 1048576, "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0, "GB": 1.0, "MB": 1 / 1024}
    return round(float(value) * scale.get(unit or "GiB", 1.0), 6)


R = re.compile
FIGURES: tuple[FigureRule, ...] = (
    FigureRule(
        R(r"^(?:Model loading took|Loading model weights took) (?P<w>[\d.]+) G(?:i)?B"),
        {"w": "model_weights_gib"},
        "max",
        f"{V} R-MODELLOAD",
    ),
    FigureRule(
        R(r"^Available KV cache memory: (?P<kv>-?[\d.]+) GiB"),
        {"kv": "available_kv_cache_gib"},
        "min",
        f"{V} R-AVAIL (vLLM takes the min over ranks)",
    ),
    FigureRule(
        R(r"^Initial free memory (?P<free>[\d.]+) GiB, reserved (?P<kv>[\d.]+) GiB memory for KV Cache"),
        {"kv": "available_kv_cache_gib", "free": "initial_free_gib"},
        "min",
        f"{V} R-KVBYTES",
    ),
    FigureRule(
        R(
            r"^(?:Auto|Explicitly) set \((?P<kv>[\d.]+)/(?P<tot>[\d.]+)\) GiB for KV cache(?: on node \d+)?(?:, with (?P<req>[\d.]+) GiB requested memory for the worker\. (?P<nonkv>[\d.]+) GiB memory was consumed by non-kv usages)?"
        ),
        {"kv": "available_kv_cache_gib", "tot": "node_total_gib", "req": "requested_memory_gib", "nonkv": "non_kv_gib"},
        "min",
        f"{V} R-CPUKV",
    ),
    FigureRule(
        R(r"^(?P<dev>[A-Z]+)(?: \+ host)? KV cache size: (?P<tok>[\d,]+) tokens"),
        {"tok": "kv_cache_tokens", "dev": "kv_cache_device"},
        "last",
        f"{V} R-KVSIZE",
    ),
    FigureRule(
        R(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"),
        {"len": "max_concurrency_tokens", "conc": "max_concurrency"},
        "last",
        f"{V} R-CONC",
    ),
    FigureRule(
        R(
            r"^# (?:GPU|CUDA|TPU|HPU|cuda|rocm|xpu|hpu|tpu|neuron) blocks: (?P<gpu>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?"
            r"|^GPU blocks: (?P<gpu2>\d+)"
        ),
        {"gpu": "num_gpu_blocks", "gpu2": "num_gpu_blocks", "cpu": "num_cpu_blocks"},
        "min",
        f"{V} R-V0BLOCKS; vllm/executor/executor_base.py ('# %s blocks', device_name), early V1 kv_cache_utils.py; "
        "0.6's tpu_executor.py, ray_tpu_executor.py, hpu_executor.py ('# TPU blocks', '# HPU blocks')",
    ),
    FigureRule(
        R(r"^Overriding num_gpu_blocks=(?P<orig>-?\d+) with num_gpu_blocks_override=(?P<ovr>\d+)"),
        {"orig": "num_gpu_blocks_profiled", "ovr": "num_gpu_blocks_override"},
        "last",
        f"{V} R-OVERRIDE",
    ),
    FigureRule(
        R(r"^Graph capturing finished in (?P<s>\d+) secs?, took (?P<g>-?[\d.]+) GiB"),
        {"g": "cuda_graph_gib", "s": "cuda_graph_capture_s"},
        "max",
        f"{V} R-CAPDONE",
    ),
    FigureRule(
        R(r"^Estimated CUDA graph memory: (?P<g>[\d.]+) GiB total"),
        {"g": "cuda_graph_estimate_gib"},
        "max",
        f"{V} R-CGEST",
    ),
    FigureRule(
        R(r"^CUDA graph pool memory: (?P<a>[\d.]+) GiB \(actual\), (?P<e>[\d.]+) GiB \(estimated\)"),
        {"a": "cuda_graph_gib", "e": "cuda_graph_estimate_gib"},
        "max",
        f"{V} R-CGPOOL",
    ),
    FigureRule(
        R(r"^(?:Setting|Forcing) (?:kv cache|attention) block size to (?P<bs>\d+)"),
        {"bs": "block_size"},
        "last",
        f"{V} R-BS",
    ),
    FigureRule(
        R(r"^Padding mamba page size by (?P<pct>[\d.]+)%"),
        {"pct": "mamba_page_padding_pct"},
        "last",
        f"{V} R-PAD-MAMBA",
    ),
    FigureRule(R(r"^Using max model len (?P<n>\d+)"), {"n": "max_model_len"}, "last", f"{V} R-MAXLEN"),
    FigureRule(
        R(r"^Chunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)"),
        {"n": "max_num_batched_tokens"},
        "last",
        f"{V} R-CHUNK",
    ),
    FigureRule(
        R(r"estimated maximum model length is (?P<est>\d+)"),
        {"est": "estimated_max_model_len"},
        "last",
        "vllm-internals.md §3 E-MAXLEN",
    ),
    FigureRule(
        R(
            r"max seq len \((?P<mml>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \((?P<av>-?[\d.]+) GiB\)"
        ),
        {"mml": "max_model_len", "need": "needed_kv_cache_gib", "av": "available_kv_cache_gib"},
        "last",
        "vllm-internals.md §3 E-MAXLEN",
    ),
    FigureRule(
        R(r"maximum number of tokens that can be stored in KV cache \((?P<cap>\d+)\)"),
        {"cap": "kv_cache_tokens"},
        "last",
        "vllm-internals.md §3 E-MAXLEN-V0",
    ),
    FigureRule(
        R(r"reduced (?:max_model_len )?from (?P<a>\d+) to (?P<b>\d+)"),
        {"a": "auto_fit_from", "b": "auto_fit_to"},
        "last",
        f"{V} R-AUTOFIT",
    ),
    FigureRule(
        R(r"on kv cache allocation is less than requested memory for kv \((?P<kv>-?[\d.]+)(?:/(?P<req>[\d.]+))? GiB\)"),
        {"kv": "requested_kv_cache_gib", "req": "requested_memory_gib"},
        "last",
        "cpu-testbed.md §2-§3",
    ),
    FigureRule(
        # The launch command or an args dump that the excerpt kept: the budget the KV pool was sized to.
        R(r"(?:--gpu-memory-utilization[ =]|gpu_memory_utilization=)(?P<u>0?\.\d+|1(?:\.0+)?)\b"),
        {"u": "gpu_memory_utilization"},
        "last",
        "vLLM EngineArgs --gpu-memory-utilization (vllm/engine/arg_utils.py)",
    ),
    FigureRule(
        R(
            r"(?:Free memory on device|Available memory on node \d+)(?: \S+)? \((?P<free>[\d.]+)/(?P<tot>[\d.]+) GiB\) on startup is less than [^(]*\((?P<u>[\d.]+), (?P<req>[\d.]+) GiB\)"
        ),
        {
            "free": "startup_free_gib",
            "tot": "total_memory_gib",
            "u": "gpu_memory_utilization",
            "req": "requested_memory_gib",
        },
        "last",
        "vllm-internals.md §3 E-STARTFREE",
    ),
    FigureRule(
        R(
            r"^Free memory on device \((?P<free>[\d.]+)/(?P<tot>[\d.]+) GiB\) on startup\. Desired GPU memory utilization is \((?P<u>[\d.]+), (?P<req>[\d.]+) GiB\)\. Actual usage is (?P<rest>.*)"
        ),
        {
            "free": "startup_free_gib",
            "tot": "total_memory_gib",
            "u": "gpu_memory_utilization",
            "req": "requested_memory_gib",
        },
        "last",
        f"{V} R-BREAKDOWN",
    ),
    FigureRule(
        R(
            r"(?:Actual usage is (?P<c>-?[\d.]+) GiB for consumed memory|(?P<w>[\d.]+) GiB for weight), .*?(?P<act>-?[\d.]+) GiB for peak activation.*?(?P<cg>-?[\d.]+) GiB for CUDAGraph memory.*?Current kv cache memory in use is (?P<kv>-?[\d.]+) GiB"
        ),
        {
            "c": "consumed_gib",
            "w": "model_weights_gib",
            "act": "peak_activation_gib",
            "cg": "cuda_graph_gib",
            "kv": "kv_cache_in_use_gib",
        },
        "last",
        f"{V} R-BREAKDOWN-NEW/-OLD",
    ),
    FigureRule(
        R(
            r"^init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) s(?:econds)?(?: \(compilation: (?P<c>[\d.]+) s)?"
        ),
        {"s": "init_engine_s", "c": "compile_s"},
        "last",
        f"{V} R-INITDONE",
    ),
    FigureRule(R(r"^Loading weights took (?P<s>[\d.]+) seconds"), {"s": "load_weights_s"}, "max", f"{V} R-WEIGHTS"),
    FigureRule(
        R(
            r"Memory profiling results: total_gpu_memory=(?P<t>[\d.]+)GiB.*?peak_torch_memory=(?P<p>[\d.]+)GiB.*?kv_cache_size=(?P<kv>[\d.]+)GiB"
        ),
        {"t": "total_memory_gib", "p": "peak_torch_gib", "kv": "available_kv_cache_gib"},
        "last",
        "vLLM 0.6 V0 profiling line",
    ),
    FigureRule(
        # LLM.generate's tqdm bar (vllm/entrypoints/llm.py `_run_engine`, desc "Processed prompts"); tqdm redraws
        # it in place with carriage returns, so one line may hold many redraws: the last one counts
        R(r"Processed prompts:\s+\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)\b(?!.*Processed prompts:)"),
        {"done": "offline_prompts_done", "total": "offline_prompts_total"},
        "last",
        "vllm/entrypoints/llm.py LLM._run_engine (tqdm desc 'Processed prompts')",
    ),
    FigureRule(
        R(r"the rest of the memory reserved for KV Cache is (?P<kv>[\d.]+) ?GiB"),
        {"kv": "available_kv_cache_gib"},
        "min",
        "vLLM 0.6 V0 profiling block",
    ),
)

# The OOM line. Units vary (MiB/GiB) per figure, so it is parsed on its own. PyTorch 2.1 printed "total capacty".
OOM_LINE = R(
    r"Tried to allocate (?P<amt>[\d.]+) (?P<au>[KMGT]iB)(?:\. GPU (?P<gpu>\d+) has a total capac?i?ty of (?P<tot>[\d.]+) (?P<tu>[KMGT]iB) of which (?P<free>[\d.]+) (?P<fu>[KMGT]iB) is free)?"
    r"|\((?:GPU (?P<gpu2>\d+); )?(?P<tot2>[\d.]+) (?P<tu2>[KMGT]iB) total capacity; .*?(?P<free2>[\d.]+) (?P<fu2>[KMGT]iB) free"
)
OOM_ALLOCATED = R(r"(?P<alloc>[\d.]+) (?P<u>[KMGT]iB) is allocated by PyTorch")
# PyTorch before 2.1 words the same figures in one parenthesis after "Tried to allocate X" ("(GPU 0; 44.56 GiB total
# capacity; 27.91 GiB already allocated; 565.31 MiB free; ...)"): "already allocated" is what PyTorch allocated.
OOM_OLD_FIGURES = R(
    r"\((?:GPU \d+; )?(?P<tot>[\d.]+) (?P<tu>[KMGT]iB) total capacity; (?P<alloc>[\d.]+) (?P<au>[KMGT]iB) already allocated;"
    r" (?P<free>[\d.]+) (?P<fu>[KMGT]iB) free"
)
OOM_IN_USE = R(r"(?:this process|Process \d+) has (?P<use>[\d.]+) (?P<u>[KMGT]iB) memory in use")
# PyTorch's OOM message names the memory its CUDA-graph pools hold (c10/cuda/CUDACachingAllocator.cpp:
# "with X GiB allocated in private pools (e.g., CUDA Graphs)"): above zero, graphs were already captured.
OOM_PRIVATE = R(r"(?P<pool>[\d.]+) (?P<u>[KMGT]iB) allocated in private pools")
# What PyTorch's caching allocator holds but no tensor uses: blocks freed and kept for reuse
# (CUDACachingAllocator.cpp: "and X MiB is reserved by PyTorch but unallocated"; before PyTorch 2.1 the total reserved,
# "Y GiB reserved in total by PyTorch", less "already allocated").
OOM_RESERVED = R(r"(?P<res>[\d.]+) (?P<u>[KMGT]iB) is reserved by PyTorch but unallocated")
OOM_OLD_RESERVED = R(r"(?P<res>[\d.]+) (?P<u>[KMGT]iB) reserved in total by PyTorch")
CPU_ALLOC = R(r"you tried to allocate (?P<b>\d+) bytes|unable to mmap (?P<m>\d+) bytes")
