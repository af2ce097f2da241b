"""The concurrency knee: double until a rung is bad, then bisect between the last good and the
first bad rung. Pure search logic; what "bad" means is the caller's rung function."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field

from oomkit.serial import JsonObject

VERDICTS = ("ok", "preemption", "slo", "failure")


@dataclass(frozen=True)
class Rung:
    concurrency: int
    verdict: str
    """ok, preemption (vllm:num_preemptions_total rose), slo (a p95 above its bound), failure (errors)."""
    detail: JsonObject = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class Knee:
    concurrency: int | None
    """The lowest concurrency found bad; None when every rung up to the limit was good."""
    reason: str
    """preemption, slo or failure; limit when nothing went bad up to --max-concurrency."""
    last_good: int | None = None

    def to_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Knee:
        """A recorded knee (ladder.json, steps.jsonl) as the Knee that wrote it."""
        concurrency, last_good = d.get("concurrency"), d.get("last_good")
        return cls(
            concurrency if isinstance(concurrency, int) else None,
            str(d.get("reason") or ""),
            last_good if isinstance(last_good, int) else None,
        )


async def find_knee(
    run_rung: Callable[[int], Awaitable[Rung]], max_concurrency: int, start: int = 1
) -> tuple[list[Rung], Knee]:
    rungs: list[Rung] = []
    last_good: int | None = None
    c = max(1, min(start, max_concurrency))
    first_bad: Rung | None = None
    while True:
        rung = await run_rung(c)
        rungs.append(rung)
        if rung.verdict == "failure":
            return rungs, Knee(c, "failure", last_good)  # a failure stops the ladder: no bisection
        if rung.verdict != "ok":
            first_bad = rung
            break
        last_good = c
        if c >= max_concurrency:
            return rungs, Knee(None, "limit", last_good)
        c = min(c * 2, max_concurrency)
    lo, hi, worst = last_good or 0, first_bad.concurrency, first_bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        rung = await run_rung(mid)
        rungs.append(rung)
        if rung.verdict == "failure":
            return rungs, Knee(mid, "failure", lo or None)
        if rung.verdict == "ok":
            lo = mid
        else:
            hi, worst = mid, rung
    return rungs, Knee(hi, worst.verdict, lo or None)
