"""Figures and settings vLLM prints, pulled from the message part of lines. A table of patterns:
named groups become figures; `keep` says which of several values (one per rank) to report."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oomkit.logs import Record
from oomkit.triage.model import Evidence
from oomkit.triage.rules import LOGO, gate

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
        R(r"^# (?:GPU|CUDA) blocks: (?P<gpu>\d+), # CPU blocks: (?P<cpu>\d+)|^GPU blocks: (?P<gpu2>\d+)"),
        {"gpu": "num_gpu_blocks", "gpu2": "num_gpu_blocks", "cpu": "num_cpu_blocks"},
        "min",
        f"{V} R-V0BLOCKS",
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
        R(r"the rest of the memory reserved for KV Cache is (?P<kv>[\d.]+) ?GiB"),
        {"kv": "available_kv_cache_gib"},
        "min",
        "vLLM 0.6 V0 profiling block",
    ),
)

# The OOM line. Units vary (MiB/GiB) per figure, so it is parsed on its own.
OOM_LINE = R(
    r"Tried to allocate (?P<amt>[\d.]+) (?P<au>[KMGT]iB)(?:\. GPU (?P<gpu>\d+) has a total capacity of (?P<tot>[\d.]+) (?P<tu>[KMGT]iB) of which (?P<free>[\d.]+) (?P<fu>[KMGT]iB) is free)?"
    r"|\((?:GPU (?P<gpu2>\d+); )?(?P<tot2>[\d.]+) (?P<tu2>[KMGT]iB) total capacity; .*?(?P<free2>[\d.]+) (?P<fu2>[KMGT]iB) free"
)
OOM_ALLOCATED = R(r"(?P<alloc>[\d.]+) (?P<u>[KMGT]iB) is allocated by PyTorch")
OOM_IN_USE = R(r"(?:this process|Process \d+) has (?P<use>[\d.]+) (?P<u>[KMGT]iB) memory in use")
CPU_ALLOC = R(r"you tried to allocate (?P<b>\d+) bytes|unable to mmap (?P<m>\d+) bytes")

STATS_HEAD = R(
    r"^(?:Engine (?P<eng>\d{3})|(?P<n>\d+) Engines Aggregated): (?P<rest>.*)$|^(?P<v0>Avg prompt throughput: .*)$"
)
STATS_FIELD = R(r"(?P<k>[A-Za-z][A-Za-z ]*?): (?P<v>[\d.]+)\s*(?:tokens/s|reqs|%)?")
STATS_NAMES = {
    "Avg prompt throughput": "prompt_tps",
    "Avg generation throughput": "generation_tps",
    "Running": "running",
    "Waiting": "waiting",
    "Pending": "waiting",
    "Swapped": "swapped",
    "Preemptions": "preemptions",
    "GPU KV cache usage": "kv_usage_pct",
    "CPU KV cache usage": "kv_usage_pct",  # the CPU backend's device; V0 on GPU prints both (GPU wins)
    "KV cache usage": "kv_usage_pct",
    "Prefix cache hit rate": "prefix_hit_pct",
}

ENGINE_CFG = R(r"^Initializing an? (?P<eng>V[01] )?LLM engine \(v(?P<ver>[^)]+)\) with config: (?P<cfg>.*)$")
VERSION = (R(r"^vLLM (?:API )?server version (?P<ver>[^\s,]+)"), R(LOGO + r"version\s+(?P<ver>\d+\.\d+\S*)\s*$"))
MODEL = (R(r"serving model (?P<m>\S+)"), R(LOGO + r"model\s+(?P<m>\S+)\s*$"))
ARGS_DICT = R(r"^non-default args: (?P<d>\{.*\})\s*$")
ARGS_NS = R(r"^args: Namespace\((?P<a>.*)\)\s*$")
ENGINE_KEYS = {
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "max_seq_len",
    "kv_cache_dtype",
    "quantization",
    "enable_prefix_caching",
    "enforce_eager",
    "dtype",
    "speculative_config",
    "enable_chunked_prefill",
    "model",
}


def split_top_level(text: str) -> dict[str, str]:
    """'a=1, b={x, y}, c=z' → {a: '1', b: '{x, y}', c: 'z'}; commas inside brackets or quotes stay."""
    out: dict[str, str] = {}
    depth, start, quote = 0, 0, ""
    parts: list[str] = []
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in parts:
        key, sep, value = part.strip().partition("=")
        if sep and re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            out[key] = value.strip()
    return out


def literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value.strip("'\"")


def parse_args_dict(text: str) -> dict[str, Any]:
    try:
        parsed = ast.literal_eval(text)
        if isinstance(parsed, dict):
            return {str(k): v for k, v in parsed.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    body = text.strip()[1:-1]  # non-literal values (enums, objects): fall back to key: value pairs
    pairs = re.findall(r"'(\w+)': ('[^']*'|\"[^\"]*\"|[^,]+)", body)
    return {k: literal(v) for k, v in pairs}


FACT_GATE = gate(
    [r.pattern for r in FIGURES]
    + [OOM_LINE, OOM_ALLOCATED, CPU_ALLOC, STATS_HEAD, ENGINE_CFG, ARGS_DICT, ARGS_NS, *VERSION, *MODEL]
)

Keep = Callable[[Any, Any], bool]
_BETTER: dict[str, Keep] = {
    "first": lambda old, new: False,
    "last": lambda old, new: True,
    "min": lambda old, new: isinstance(new, (int, float)) and new < old,
    "max": lambda old, new: isinstance(new, (int, float)) and new > old,
}


class FactCollector:
    """Accumulates facts from candidate records."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.engine: str | None = None
        self.model: str | None = None
        self.args: dict[str, Any] = {}
        self.figures: dict[str, Any] = {}
        self.evidence: dict[str, Evidence] = {}
        self.stats = StatsAggregate()

    def feed_stats(self, rec: Record) -> bool:
        """A periodic stats line is recorded and reported; it carries no other fact."""
        return rec.msg[:1] in "E1234567890A" and self._stats(rec, rec.msg)

    def feed(self, rec: Record) -> None:
        msg = rec.msg
        if not FACT_GATE.search(msg):
            return
        self._identity(rec, msg)
        for rule in FIGURES:
            m = rule.pattern.search(msg)
            if m:
                self._keep(rule, m, rec)
        if "Tried to allocate" in msg or "total capacity" in msg or "allocated by PyTorch" in msg:
            self._oom_line(rec, msg)
        m = CPU_ALLOC.search(msg)
        if m:
            self._set("oom_tried_bytes", int(m.group("b") or m.group("m")), rec, "last")

    def _identity(self, rec: Record, msg: str) -> None:
        m = ENGINE_CFG.match(msg)
        if m:
            self.version = self.version or m.group("ver")
            self.engine = (m.group("eng") or "V0 ").strip().lower()
            cfg = split_top_level(m.group("cfg"))
            for key in ENGINE_KEYS & cfg.keys():
                self.args.setdefault(key, literal(cfg[key]))
            self.model = self.model or (literal(cfg["model"]) if "model" in cfg else None)
            self.evidence.setdefault("engine", Evidence(rec.file, rec.line, rec.text))
        for pat in VERSION:
            m = pat.search(msg)
            if m and not self.version:
                self.version = m.group("ver")
                self.evidence["vllm_version"] = Evidence(rec.file, rec.line, rec.text)
        for pat in MODEL:
            m = pat.search(msg)
            if m and not self.model:
                self.model = m.group("m")
        m = ARGS_DICT.match(msg)
        if m:
            self.args.update(parse_args_dict(m.group("d")))
            self.evidence["args"] = Evidence(rec.file, rec.line, rec.text)
            self.model = self.model or self.args.get("model")
        m = ARGS_NS.match(msg)
        if m:
            self.args.update({k: literal(v) for k, v in split_top_level(m.group("a")).items()})
            self.evidence["args"] = Evidence(rec.file, rec.line, rec.text)
        if self.engine is None and rec.proc:
            if rec.proc.startswith(("EngineCore", "VllmWorker ", "Worker", "APIServer")):
                self.engine = "v1"
            elif rec.proc.startswith("VllmWorkerProcess"):
                self.engine = "v0"

    def _keep(self, rule: FigureRule, m: re.Match[str], rec: Record) -> None:
        for group, name in rule.names.items():
            raw = m.group(group)
            if raw is None:
                continue
            value: Any = raw if name == "kv_cache_device" else _num(raw)
            self._set(name, value, rec, rule.keep)

    def _set(self, name: str, value: Any, rec: Record, keep: str) -> None:
        if name not in self.figures or _BETTER[keep](self.figures[name], value):
            self.figures[name] = value
            self.evidence[name] = Evidence(rec.file, rec.line, rec.text)

    def _oom_line(self, rec: Record, msg: str) -> None:
        m = OOM_LINE.search(msg)
        g = m.groupdict() if m else {}
        if g.get("amt"):
            self._set("oom_tried_gib", _gib(g["amt"], g["au"]), rec, "last")
        tot, tu = g.get("tot") or g.get("tot2"), g.get("tu") or g.get("tu2")
        free, fu = g.get("free") or g.get("free2"), g.get("fu") or g.get("fu2")
        if tot:
            self._set("oom_total_gib", _gib(tot, tu), rec, "last")
        if free:
            self._set("oom_free_gib", _gib(free, fu), rec, "last")
        gpu = g.get("gpu") or g.get("gpu2")
        if gpu:
            self._set("oom_gpu", int(gpu), rec, "last")
        a = OOM_ALLOCATED.search(msg)
        if a:
            self._set("oom_pytorch_allocated_gib", _gib(a.group("alloc"), a.group("u")), rec, "last")
        u = OOM_IN_USE.search(msg)
        if u:
            self._set("oom_in_use_gib", _gib(u.group("use"), u.group("u")), rec, "last")

    def _stats(self, rec: Record, msg: str) -> bool:
        m = STATS_HEAD.match(msg)
        if not m:
            return False
        rest = m.group("rest") or m.group("v0") or ""
        sample: dict[str, float] = {}
        for f in STATS_FIELD.finditer(rest):
            key = f.group("k").strip()
            name = STATS_NAMES.get(key)
            if name and not (key == "CPU KV cache usage" and name in sample):  # V0: GPU usage, then swap space
                sample[name] = float(f.group("v"))
        if sample:
            self.stats.add(sample, Evidence(rec.file, rec.line, rec.text))
        return True


FULL_KV_PCT = 95.0  # issue 13: KV usage >= 95% with requests waiting is cache pressure
SATURATED_KV_PCT = 99.0


class StatsAggregate:
    """Running aggregates of the periodic stats lines (constant memory on any log size) plus the
    recent samples that the cache-pressure rule looks at."""

    RECENT = 12

    def __init__(self) -> None:
        self.samples = 0
        self.max: dict[str, float] = {}
        self.max_evidence: dict[str, Evidence] = {}
        self.preemptions = 0.0
        self.last: dict[str, float] = {}
        self.recent: list[tuple[dict[str, float], Evidence]] = []
        self.full_samples = 0  # KV cache nearly full while requests wait
        self.saturated_samples = 0  # KV cache at 99%+ while requests wait: admission is KV-bound
        self.full_evidence: list[Evidence] = []

    def add(self, sample: dict[str, float], ev: Evidence) -> None:
        self.samples += 1
        if sample.get("kv_usage_pct", 0.0) >= FULL_KV_PCT and sample.get("waiting", 0.0) > 0:
            self.full_samples += 1
            self.saturated_samples += sample.get("kv_usage_pct", 0.0) >= SATURATED_KV_PCT
            if len(self.full_evidence) < 3:
                self.full_evidence.append(ev)
        for k, v in sample.items():
            if v > self.max.get(k, float("-inf")):
                self.max[k], self.max_evidence[k] = v, ev
        self.preemptions += sample.get("preemptions", 0.0)
        self.last = sample
        self.recent.append((sample, ev))
        del self.recent[: -self.RECENT]

    def add_bulk(self, count: int, peaks: dict[str, float]) -> None:
        """Stats lines the reader counted without reading one by one (the prefilter reads every one
        that can be full or preempting, so these only add samples and may raise a peak)."""
        self.samples += count
        for name, peak in peaks.items():
            if peak > self.max.get(name, float("-inf")):
                self.max[name] = peak
                self.max_evidence.pop(name, None)  # the peak's line was counted, not read

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        return {
            "samples": self.samples,
            "max_kv_usage_pct": self.max.get("kv_usage_pct"),
            "max_running": self.max.get("running"),
            "max_waiting": self.max.get("waiting"),
            "preemptions": self.preemptions,
            "full_kv_samples": self.full_samples,
            "last_prefix_hit_pct": self.last.get("prefix_hit_pct"),
            "last": self.last,
        }
