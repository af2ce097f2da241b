"""Layout spellings for `--layouts`: `tp8,dep16,tp8xpp2`. Each layout is one or more parts joined
by `x`; each part is a kind and a size:

    tpN    tensor parallel N                   tepN   tensor parallel N with expert parallel
    ppN    pipeline parallel N                 dpN    N data-parallel engines
    depN   N data-parallel engines with expert parallel (vLLM's --data-parallel-size N
           --enable-expert-parallel: experts over TP x DP ranks)

`dp2xtp4` is two engines of TP4 (8 GPUs); `dep8xtp2` is DEP8 with TP2 inside each engine. A kind is
given once, `dp`/`dep` and `tp`/`tep` exclude one another; the GPU count is TP x PP x DP. The
planner's options (--model, --gpu, --max-model-len, ...) apply to every layout; the layout sets
TP, PP, DP and EP."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from oomkit.errors import InputError
from oomkit.plan import PlanRequest

MAX_PARALLEL = 4096
"""Largest size of one part: beyond any deployment vLLM has been run on."""
_PART = re.compile(r"^(tep|tp|pp|dep|dp)([0-9]+)$")
_FAMILY = {"tp": "tp", "tep": "tp", "pp": "pp", "dp": "dp", "dep": "dp"}
_HINT = "spell layouts as tpN, tepN, ppN, dpN or depN joined by x, e.g. --layouts tp8,dep16,tp8xpp2"


@dataclass(frozen=True)
class LayoutSpec:
    spelling: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def apply(self, req: PlanRequest) -> PlanRequest:
        """The plan request for this layout: the same model, GPU and settings, this parallelism."""
        return replace(req, tp=self.tp, pp=self.pp, dp=self.dp, ep=self.ep, gpus=self.gpus)


def parse_layouts(text: str) -> tuple[LayoutSpec, ...]:
    """Every layout of a comma list, in order; InputError (exit 2) naming the bad spelling."""
    spellings = [s.strip() for s in text.split(",") if s.strip()]
    if not spellings:
        raise InputError("--layouts is empty", hint=_HINT)
    out: list[LayoutSpec] = []
    for s in spellings:
        spec = parse_layout(s)
        same = [o.spelling for o in out if replace(o, spelling=s) == spec]
        if same:
            raise InputError(f"--layouts names one layout twice ({same[0]!r} and {s!r})", hint="list each layout once")
        out.append(spec)
    return tuple(out)


def parse_layout(spelling: str) -> LayoutSpec:
    sizes: dict[str, int] = {}
    ep = False
    for part in spelling.lower().split("x"):
        m = _PART.match(part)
        if not m:
            raise InputError(f"layout {spelling!r}: {part!r} is not tpN, tepN, ppN, dpN or depN", hint=_HINT)
        kind, size = m.group(1), int(m.group(2))
        if not 1 <= size <= MAX_PARALLEL:
            raise InputError(f"layout {spelling!r}: {kind} size {size} is outside 1..{MAX_PARALLEL}", hint=_HINT)
        family = _FAMILY[kind]
        if family in sizes:
            raise InputError(f"layout {spelling!r} gives the {family.upper()} size twice", hint=_HINT)
        sizes[family] = size
        ep = ep or kind in ("tep", "dep")
    return LayoutSpec(spelling, tp=sizes.get("tp", 1), pp=sizes.get("pp", 1), dp=sizes.get("dp", 1), ep=ep)
