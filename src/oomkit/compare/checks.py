"""Checks made before any server starts: a retention interval on a model without sliding-window or
mamba/linear layers (vLLM refuses to start), and which retention spelling this vLLM reads."""

from __future__ import annotations

from dataclasses import replace
from typing import NotRequired, TypedDict

from oomkit.compare.factors import RETENTION, RETENTION_ENV, installed_vllm_dir, retention_forms, retention_note
from oomkit.compare.spec import Mode, Plan
from oomkit.errors import InputError
from oomkit.launch.profile import Profile

# Attention kinds whose KV groups the retention interval applies to (vllm/config/cache.py
# docstring; kv_cache_coordinator._validate_prefix_cache_retention_interval).
RETENTION_KINDS = ("sliding", "linear")
REJECTED_LINE = (
    "ValueError: prefix_cache_retention_interval is set but this model has no sliding-window or "
    "Mamba KV cache group, so retention has no effect (cpu-testbed.md §5, llama_retention_rejected.log)"
)


class RetentionLayers(TypedDict):
    layers: int | None
    """Layers the retention interval applies to; None when the model's config is not readable here."""
    why: NotRequired[str]
    kinds: NotRequired[dict[str, int]]
    model: NotRequired[str]


def retention_layers(profile: Profile) -> RetentionLayers:
    """How many layers of the profile's model the retention interval applies to (None: unknown)."""
    from oomkit.plan.catalog import find_model

    try:
        shape = find_model(profile.resolved_model(create=True))
    except Exception as err:  # an HF id without a local config, an unreadable file: say so, do not guess
        return {"layers": None, "why": f"model config not readable here ({type(err).__name__}: {err})"}
    kinds = {k: shape.count(k) for k in ("full", "sliding", "linear", "mla")}
    return {"layers": sum(kinds[k] for k in RETENTION_KINDS), "kinds": kinds, "model": shape.name}


def _nonzero(value: object) -> bool:
    return str(value) not in ("0",)


def check_retention(mode: Mode, profile: Profile) -> Mode:
    info = retention_layers(profile)
    if info["layers"] == 0 and _nonzero(mode.value):
        raise InputError(
            f"variant {mode.name!r}: {RETENTION} {mode.value} on {info['model']}, a model with only "
            f"full-attention layers ({info['kinds']}), is a vLLM startup error: {REJECTED_LINE}",
            hint="the interval applies only to sliding-window and mamba/linear-attention models "
            "(use testbed-hybrid.yaml on the CPU testbed)",
        )
    notes = list(mode.notes)
    if info["layers"] is None:
        notes.append(f"could not check the model's layer kinds: {info['why']}")
    else:
        notes.append(f"{info['layers']} sliding-window/linear layers of {sum(info['kinds'].values())} use it")
    if profile.start.command:
        notes.append(f"vLLM runs from a command ({profile.start.command[0]}): {RETENTION_ENV} support not checked")
    else:
        notes.append(retention_note(retention_forms(installed_vllm_dir())))
    return replace(mode, notes=tuple(notes))


def check_plan(plan: Plan, profile: Profile) -> Plan:
    modes = tuple(check_retention(m, profile) if m.factor == RETENTION else m for m in plan.modes)
    notes = list(plan.notes)
    if RETENTION_ENV in profile.env:
        notes.append(
            f"the profile sets {RETENTION_ENV} in env: "
            + retention_note(retention_forms(installed_vllm_dir()))
            + f"; set args.{RETENTION} instead"
        )
    return replace(plan, modes=modes, notes=tuple(notes))


def variant_profile(profile: Profile, mode: Mode) -> Profile:
    """The baseline profile with the mode's one vLLM argument changed (and a label saying so)."""
    if mode.factor is None:
        raise ValueError(f"mode {mode.name!r} changes no factor: it runs on the baseline profile")
    args = {**profile.args, mode.factor: mode.value}
    label = f"{profile.label or 'server'}-{mode.name}"[:48]
    return profile.model_copy(update={"args": args, "label": label})
