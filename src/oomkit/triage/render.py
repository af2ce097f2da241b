"""Human-readable triage output."""

from __future__ import annotations

from oomkit.logs import parse_line
from oomkit.redact import redact
from oomkit.triage.model import TriageResult

FIGURE_LABELS = (
    ("model_weights_gib", "model weights", "GiB"),
    ("available_kv_cache_gib", "available KV cache", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", ""),
    ("max_concurrency", "max concurrency", "x"),
    ("max_concurrency_tokens", "  at tokens per request", ""),
    ("estimated_max_model_len", "vLLM's estimated max length", ""),
    ("cuda_graph_gib", "CUDA graphs", "GiB"),
    ("node_total_gib", "CPU node total", "GiB"),
    ("total_memory_gib", "device total", "GiB"),
    ("requested_memory_gib", "requested budget", "GiB"),
    ("oom_tried_gib", "OOM: tried to allocate", "GiB"),
    ("oom_free_gib", "OOM: free on device", "GiB"),
    ("oom_pytorch_allocated_gib", "OOM: allocated by PyTorch", "GiB"),
    ("oom_reserved_unallocated_gib", "OOM: reserved, unallocated", "GiB"),
    ("block_size", "attention block size", ""),
)


def render(res: TriageResult, width: int = 100) -> str:
    v = res.verdict
    out = [
        f"phase:      {v.phase}{'  (out of memory)' if v.is_oom else ''}",
        f"confidence: {v.confidence} - {v.confidence_reason}",
        f"why:        {v.summary}",
    ]
    f = res.facts
    ident = ", ".join(
        x
        for x in (
            f"vLLM {f.vllm_version}" if f.vllm_version else "",
            f.engine or "",
            f"model {f.model}" if f.model else "",
        )
        if x
    )
    if ident:
        out.append(f"deployment: {ident}")
    if res.timeline:
        out.append("timeline:   " + " -> ".join(t.phase for t in res.timeline))
    if v.evidence:
        out.append("evidence:")
        # Redacted before the cut: a cut inside a secret would leave a prefix no pattern recognises.
        out += [f"  {e.where}: {_cut(redact(parse_line(e.text).msg or e.text), width)}" for e in v.evidence]
    figures = [(label, f.figures[key], unit) for key, label, unit in FIGURE_LABELS if f.figures.get(key) is not None]
    if figures:
        out.append("figures:")
        out += [
            f"  {label:<30} {value:g}{(' ' + unit) if unit and unit != 'x' else unit}"
            if isinstance(value, (int, float))
            else f"  {label:<30} {value}"
            for label, value, unit in figures
        ]
    if f.stats:
        s = f.stats
        out.append(
            f"serving:    {s['samples']} stats lines, max KV usage {s.get('max_kv_usage_pct')}%, "
            f"max waiting {s.get('max_waiting')}, preemptions {s.get('preemptions'):g}"
        )
    if v.advice:
        out.append("next:")
        out += [f"  - {a}" for a in v.advice]
    out += [f"warning: {w}" for w in res.warnings]
    return redact("\n".join(out))


def _cut(text: str, width: int) -> str:
    text = text.strip()
    return text if len(text) <= width else text[: width - 3] + "..."
