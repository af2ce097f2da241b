"""Identity and settings (version, engine, model, args) and the figures a log prints, collected from
the message part of candidate lines (`figures.py` holds the figure table, `stats.py` the stats lines)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from oomkit.logs import Record
from oomkit.serial import Json, JsonObject
from oomkit.triage.figures import (
    CPU_ALLOC,
    FIGURES,
    OOM_ALLOCATED,
    OOM_IN_USE,
    OOM_LINE,
    OOM_OLD_FIGURES,
    OOM_OLD_RESERVED,
    OOM_PRIVATE,
    OOM_RESERVED,
    FigureRule,
    _gib,
    _num,
)
from oomkit.triage.model import Evidence, FigureValue
from oomkit.triage.rules import LOGO, gate
from oomkit.triage.stats import FULL_KV_PCT, STATS_FIELD, STATS_HEAD, STATS_NAMES, WRAPPED_STATS, StatsAggregate

R = re.compile
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


def literal(value: str) -> Json:
    """A value as the log printed it (Python's repr), as JSON: what `literal_eval` reads, with tuples
    and sets as lists and bytes as text, so a printed `{1, 2}` or `b'x'` cannot break `--json`."""
    try:
        return _as_json(ast.literal_eval(value))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value.strip("'\"")


def _as_json(value: object) -> Json:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_as_json(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)  # complex numbers and the like: kept as printed


def parse_args_dict(text: str) -> JsonObject:
    try:
        parsed = _as_json(ast.literal_eval(text))
        if isinstance(parsed, dict):
            return parsed
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    body = text.strip()[1:-1]  # non-literal values (enums, objects): fall back to key: value pairs
    pairs = re.findall(r"'(\w+)': ('[^']*'|\"[^\"]*\"|[^,]+)", body)
    return {k: literal(v) for k, v in pairs}


FACT_GATE = gate(
    [r.pattern for r in FIGURES]
    + [
        OOM_LINE,
        OOM_ALLOCATED,
        OOM_PRIVATE,
        OOM_RESERVED,
        OOM_OLD_RESERVED,
        CPU_ALLOC,
        STATS_HEAD,
        ENGINE_CFG,
        ARGS_DICT,
        ARGS_NS,
        *VERSION,
        *MODEL,
    ]
)

Keep = Callable[[FigureValue, FigureValue], bool]
_BETTER: dict[str, Keep] = {
    "first": lambda old, new: False,
    "last": lambda old, new: True,
    "min": lambda old, new: isinstance(new, int | float) and isinstance(old, int | float) and new < old,
    "max": lambda old, new: isinstance(new, int | float) and isinstance(old, int | float) and new > old,
}


class FactCollector:
    """Accumulates facts from candidate records."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.engine: str | None = None
        self.model: str | None = None
        self.args: JsonObject = {}  # the settings the log printed (raw input, as JSON values)
        self.figures: dict[str, FigureValue] = {}
        self.evidence: dict[str, Evidence] = {}
        self.stats = StatsAggregate()

    def feed_stats(self, rec: Record) -> bool:
        """A periodic stats line is recorded and reported; it carries no other fact."""
        if rec.msg[:1] in "E1234567890A":
            return self._stats(rec, rec.msg)
        return rec.src is None and "KV cache usage: " in rec.msg and self._wrapped_stats(rec)

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
            self.model = self.model or _text(literal(cfg["model"]) if "model" in cfg else None)
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
            self.model = self.model or _text(self.args.get("model"))
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
            value: FigureValue = raw if name == "kv_cache_device" else _num(raw)
            self._set(name, value, rec, rule.keep)

    def _set(self, name: str, value: FigureValue, rec: Record, keep: str) -> None:
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
        if old := OOM_OLD_FIGURES.search(msg):
            self._set("oom_total_gib", _gib(old.group("tot"), old.group("tu")), rec, "last")
            self._set("oom_free_gib", _gib(old.group("free"), old.group("fu")), rec, "last")
            self._set("oom_pytorch_allocated_gib", _gib(old.group("alloc"), old.group("au")), rec, "last")
        u = OOM_IN_USE.search(msg)
        if u:
            self._set("oom_in_use_gib", _gib(u.group("use"), u.group("u")), rec, "last")
        pool = OOM_PRIVATE.search(msg)
        if pool:
            self._set("oom_private_pools_gib", _gib(pool.group("pool"), pool.group("u")), rec, "last")
        if res := OOM_RESERVED.search(msg):
            self._set("oom_reserved_unallocated_gib", _gib(res.group("res"), res.group("u")), rec, "last")
        elif (res := OOM_OLD_RESERVED.search(msg)) and old:
            reserved = _gib(res.group("res"), res.group("u")) - _gib(old.group("alloc"), old.group("au"))
            self._set("oom_reserved_unallocated_gib", round(max(reserved, 0.0), 3), rec, "last")

    def _wrapped_stats(self, rec: Record) -> bool:
        """The headerless rest of a wrapped stats line, read as a sample of its own only when it shows the cache
        full with requests waiting, or preemptions: the lines the prefilter's key keeps (PRESSURE), so that the
        fast path reads the same tails as a full read (their heads are counted between key lines, not read)."""
        m = WRAPPED_STATS.match(rec.msg)
        if not m:
            return False
        sample = _fields(m.group("rest"))
        full = sample.get("kv_usage_pct", 0.0) >= FULL_KV_PCT and sample.get("waiting", 0.0) > 0
        if not (full or sample.get("preemptions", 0.0) > 0):
            return False
        self.stats.add(sample, Evidence(rec.file, rec.line, rec.text))
        return True

    def _stats(self, rec: Record, msg: str) -> bool:
        m = STATS_HEAD.match(msg)
        if not m:
            return False
        sample = _fields(m.group("rest") or m.group("v0") or "")
        if sample:
            self.stats.add(sample, Evidence(rec.file, rec.line, rec.text))
        return True


def _fields(rest: str) -> dict[str, float]:
    """A stats line's named figures."""
    sample: dict[str, float] = {}
    for f in STATS_FIELD.finditer(rest):
        key = f.group("k").strip()
        name = STATS_NAMES.get(key)
        if name and not (key == "CPU KV cache usage" and name in sample):  # V0: GPU usage, then swap space
            sample[name] = float(f.group("v"))
    return sample


def _text(value: Json) -> str | None:
    return value if isinstance(value, str) else None
