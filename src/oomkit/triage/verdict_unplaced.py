"""The last word on a crash: an exception that no frame, marker or serving line placed. Its mined template may
name the start-up step that raises it, or its wording may be a refusal of the launch's settings; else it is a
crash that is not memory, placed nowhere."""

from __future__ import annotations

from oomkit.redact import redact
from oomkit.triage.engine import Triage
from oomkit.triage.knowledge_rules import refused_setting, template_phase
from oomkit.triage.model import Evidence, Verdict
from oomkit.triage.state import Hit
from oomkit.triage.verdict_make import Conclusion, make_verdict


def unplaced_crash(t: Triage, exc: Evidence | None, first: Hit, shown: list[Hit], hits: list[Hit]) -> Verdict:
    """`first`: the first crash wrapper; `exc`: the exception line, when the log has it."""
    # An exception no rule names, with no frame, marker or serving line around it: not memory by its wording,
    # but nothing says where it was raised (before start-up, vLLM's settings and the installation raise too).
    # A request vLLM refused or trimmed in the same log (E-REQLEN) means the engine was serving: not start-up.
    served = any(h.rule.cls == "request" for h in hits)
    placeless = first.context_phase is None and not first.after_ready and not served
    # A refusal's wording names the launch's settings, whichever step's function vLLM checks them in ("does not support
    # LoRA yet" is raised while loading): the convention files it under environment, so the wording goes first.
    mined = template_phase(exc.text) if exc is not None and placeless and not refused_setting(exc.text) else None
    if mined is not None and exc is not None:
        phase, row = mined
        return make_verdict(
            Conclusion(
                phase,
                False,
                "low",
                f"no frame or marker places it; vLLM raises this message in {row.source}, "
                f"on the {phase.replace('_', ' ')} path (decision order: template)",
                f"start-up failed during {phase.replace('_', ' ')} with an error that is not a memory error: "
                f"{redact(exc.text.split('] ')[-1])[:200]}",
                first.rule.id,
            ),
            shown,
            t,
            extra=[exc],
            decided_by="template",
        )
    if exc is not None and placeless and _refused_before_serving(t, exc):
        return make_verdict(
            Conclusion(
                "environment",
                False,
                "low",
                "no frame or marker places it; it is worded as a refusal of a setting, a device count or a "
                "platform feature, raised before the engine served (decision order: template)",
                f"the launch was refused: {redact(exc.text.split('] ')[-1])[:200]}",
                first.rule.id,
            ),
            shown,
            t,
            extra=[exc],
            decided_by="template",
        )
    summary = "the engine died with an error that is not a memory error"
    # Redacted before the cut, which could otherwise end inside a secret and keep an unmaskable prefix.
    summary += f": {redact(exc.text.split('] ')[-1])[:200]}" if exc else " (the exception itself is not in the log)"
    return make_verdict(
        Conclusion(
            "not_oom_other",
            False,
            "medium" if exc and not placeless else "low",
            "fatal engine error without any memory, network or environment signature"
            + ("; no frame, marker or serving line places it" if placeless else ""),
            summary,
            first.rule.id,
        ),
        shown,
        t,
        extra=[exc] if exc else [],
        decided_by="template" if exc else "context",
    )


def _refused_before_serving(t: Triage, exc: Evidence) -> bool:
    """Worded as vLLM's argument and platform checks word a refusal, with no serving in the log."""
    return refused_setting(exc.text) and not any(entry.phase == "serving" for entry in t.state.timeline)
