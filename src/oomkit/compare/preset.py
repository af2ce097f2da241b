"""Preset `cache-vs-context`: the method's three comparisons on one request set.
(1) keep the cache, lower concurrency; (2) keep concurrency, shorten history; (3) change the
prefix-cache retention policy (only where the model has sliding-window or mamba/linear layers)."""

from __future__ import annotations

from dataclasses import dataclass

from oomkit.compare.checks import retention_layers
from oomkit.compare.factors import RETENTION
from oomkit.compare.spec import ExperimentSpec, VariantSpec
from oomkit.launch import load_profile

PRESETS = ("cache-vs-context",)
LOWER_CONCURRENCY = "lower-concurrency"
SHORTER_HISTORY = "shorter-history"
RETENTION_MODE = "retention"


@dataclass(frozen=True)
class Preset:
    spec: ExperimentSpec
    notes: tuple[str, ...]


def retention_alternative(current: object) -> object:
    """Dense checkpoints (None) against the default 0; back to 0 from anything else."""
    return "None" if str(current if current is not None else 0) == "0" else 0


@dataclass(frozen=True)
class PresetOptions:
    repeats: int = 2
    history_turns: int = 1
    """Turns of history the shorter-history mode keeps."""
    sessions: int | None = None
    steps: int | None = None
    name: str = "cache-vs-context"


def cache_vs_context(
    profile: str, workload: str | None, concurrency: int, opts: PresetOptions = PresetOptions()
) -> Preset:
    prof = load_profile(profile)
    notes: list[str] = []
    variants = []
    if concurrency > 1:
        variants.append(
            VariantSpec(
                name=LOWER_CONCURRENCY,
                set={"concurrency": max(1, concurrency // 2)},
                note="(1) keep the cache, lower concurrency",
            )
        )
    else:
        notes.append("(1) lower concurrency: skipped, the target concurrency is already 1")
    variants.append(
        VariantSpec(
            name=SHORTER_HISTORY,
            set={"history_turns": opts.history_turns},
            note="(2) keep concurrency, shorten history: changes what the agent sees",
        )
    )
    info = retention_layers(prof)
    if info["layers"] == 0:
        notes.append(
            f"(3) retention: skipped: {info['model']} has only full-attention layers, where a non-zero "
            f"{RETENTION} is a vLLM startup error (use a sliding-window or hybrid model, e.g. "
            "examples/testbed-hybrid.yaml)"
        )
    elif not prof.arg("enable_prefix_caching", False):
        notes.append("(3) retention: skipped: the profile does not enable prefix caching")
    else:
        alt = retention_alternative(prof.arg(RETENTION))
        variants.append(
            VariantSpec(
                name=RETENTION_MODE,
                set={RETENTION: alt},
                note=f"(3) cache-retention policy: {RETENTION} {prof.arg(RETENTION, 0)} -> {alt}",
            )
        )
    spec = ExperimentSpec(
        name=opts.name,
        profile=str(profile),
        workload=workload,
        concurrency=concurrency,
        sessions=opts.sessions,
        steps=opts.steps,
        repeats=opts.repeats,
        variants=variants,
    )
    return Preset(spec, tuple(notes))
