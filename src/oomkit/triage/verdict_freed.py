"""Where a lone OOM line stands from what PyTorch had freed and cached when it failed: before or after the first
forward pass (`verdict.py` asks these once no marker or frame places the line)."""

from __future__ import annotations

from collections.abc import Mapping

from oomkit.triage.model import FigureValue

# PyTorch's caching allocator keeps what tensors free as "reserved but unallocated". A forward pass frees its
# activations layer by layer, so once one has run (profiling, warm-up, a step) that cache holds hundreds of MiB or
# more; loading weights keeps every tensor it allocates, so until then it stays near zero. Measured on the corpus's
# lone OOM lines (dev part): weight loading 0.00-0.14 GiB, profiling and serving 0.16-2.5 GiB.
FREED_NOTHING_GIB = 0.1


def no_forward_pass(figures: Mapping[str, FigureValue]) -> tuple[str, str, str] | None:
    """A lone OOM before any forward pass had run, from what PyTorch had freed and cached (None: it had run, or the
    line does not say)."""
    cached = figure_gib(figures, "oom_reserved_unallocated_gib")
    if cached is None or cached >= FREED_NOTHING_GIB or (figure_gib(figures, "oom_private_pools_gib") or 0.0) > 0:
        return None  # CUDA graphs' private pools in use: capture, and the forward passes before it, had run
    return (
        "weight_loading",
        "low",
        f"PyTorch had freed almost nothing ({cached:g} GiB cached unallocated): no forward pass had run, whose "
        "activations leave freed blocks cached; loading the weights keeps what it allocates",
    )


def forward_pass(figures: Mapping[str, FigureValue]) -> tuple[str, str, str] | None:
    """A lone OOM after a forward pass but before the KV pool was allocated: the profiling pass (None: the figures
    do not say so)."""
    cached = figure_gib(figures, "oom_reserved_unallocated_gib")
    if cached is None or cached < FREED_NOTHING_GIB:
        return None
    allocated, total = figure_gib(figures, "oom_pytorch_allocated_gib"), figure_gib(figures, "oom_total_gib")
    if allocated is None or total is None or allocated >= 0.9 * total:
        return None
    return (
        "memory_profiling",
        "low",
        f"PyTorch had freed and cached {cached:g} GiB, so a forward pass had run, and held {allocated:g} of "
        f"{total:g} GiB, so the KV pool was not allocated yet: the profiling pass, the first forward pass",
    )


def figure_gib(figures: Mapping[str, FigureValue], name: str) -> float | None:
    """A figure in GiB, None when the log did not print it."""
    value = figures.get(name)
    return float(value) if isinstance(value, int | float) else None
