"""How much a decode fast-forward could save the forecast (issue 17, "Scale"): the upper bound on
folding several scheduler steps into one, measured on the scale benchmark's own traffic.

Issue 17 allows advancing several decode steps at once where provably nothing can change (no arrival,
no finish, no admission, no preemption), with vLLM's `allocate_slots` called once for K tokens. This
script runs `benchmarks/forecast_scale.py`'s forecast unchanged and classifies every step vLLM's
scheduler takes. A step could be folded into the one before it only when

- both steps are pure decode: every scheduled request got one token and nothing was waiting;
- no request joined the engine before it (an arrival is an admission decision);
- no request finished in the step before it (a finish frees blocks and sends the agent's next request);
- both end in the same 0.1 s tick of the forecast's /metrics scrapers (forecast.scrape reads the KV
  gauge between steps; a folded step hides the values it would read).

It prints the share of foldable steps and the ideal reduction in scheduler calls, steps / (steps -
foldable): a ceiling on the speed-up, since a folded run still costs one allocation per request.

    .venv/bin/python benchmarks/forecast_fold_bound.py --sessions 150 --layouts tp8
    .venv/bin/python benchmarks/forecast_fold_bound.py                      # 1,000 sessions, tp8 and dep16

Measured (2026-12-05, this 2-core machine): docs/forecast.md, "Speed".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forecast_scale  # noqa: E402 - the scale benchmark's workload and forecast, unchanged

from oomkit.forecast import simulate  # noqa: E402
from oomkit.forecast.scrape import PHASES, SCRAPE_INTERVAL_S  # noqa: E402

TICK_S = SCRAPE_INTERVAL_S / PHASES


@dataclass(frozen=True)
class StepSeen:
    end_s: float
    pure_decode: bool
    arrival_before: bool
    finished_in: bool


class Observer:
    """Wraps the rung's step, arrival and finish to see each step as the forecast takes it."""

    def __init__(self) -> None:
        self.steps: list[StepSeen] = []
        self._arrived = self._finished = False

    def install(self) -> None:
        step, arrive, finish = simulate.Rung._step, simulate.Rung._arrive, simulate.Rung._finish
        observer = self

        def arrive_seen(rung: Any, *args: Any) -> Any:
            observer._arrived = True
            return arrive(rung, *args)

        def finish_seen(rung: Any, *args: Any) -> Any:
            observer._finished = True
            return finish(rung, *args)

        def step_seen(rung: Any, group: list[Any], start_s: float) -> bool:
            outs = observer._watch(group)
            observer._finished = False
            stepped = step(rung, group, start_s)
            for lane in group:
                del lane.scheduler.schedule
            if stepped:
                pure = all(out is None or _pure(out, waiting) for out, waiting in outs)
                observer.steps.append(StepSeen(rung.now_s, pure, observer._arrived, observer._finished))
            observer._arrived = False
            return stepped

        simulate.Rung._step, simulate.Rung._arrive, simulate.Rung._finish = step_seen, arrive_seen, finish_seen

    @staticmethod
    def _watch(group: list[Any]) -> list[tuple[Any, int]]:
        outs: list[tuple[Any, int]] = []
        for lane in group:
            scheduler, schedule = lane.scheduler, lane.scheduler.schedule

            def watched(scheduler: Any = scheduler, schedule: Any = schedule) -> Any:
                out = schedule()
                outs.append((out, len(scheduler.waiting)))
                return out

            scheduler.schedule = watched
        return outs


def _pure(out: Any, waiting: int) -> bool:
    return waiting == 0 and all(n == 1 for n in out.num_scheduled_tokens.values())


def foldable(steps: list[StepSeen]) -> tuple[int, int]:
    """Steps that could join the step before them: without and with the scrape-tick condition."""
    pairs = [
        (prev, cur)
        for prev, cur in zip(steps, steps[1:], strict=False)
        if prev.pure_decode and cur.pure_decode and not cur.arrival_before and not prev.finished_in
    ]
    same_tick = [(prev, cur) for prev, cur in pairs if int(prev.end_s / TICK_S) == int(cur.end_s / TICK_S)]
    return len(pairs), len(same_tick)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--window-s", type=float, default=600.0)
    ap.add_argument("--layouts", default="tp8,dep16")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "workload.yaml"
        workload.write_text(yaml.safe_dump({**forecast_scale.WORKLOAD, "sessions": args.sessions}), encoding="utf-8")
        observer = Observer()
        observer.install()
        for layout in args.layouts.split(","):
            observer.steps.clear()
            forecast_scale.one(layout, args.sessions, args.window_s, 3600.0, str(workload), None)
            steps = len(observer.steps)
            folds, folds_in_tick = foldable(observer.steps)
            print(
                json.dumps(
                    {
                        "layout": layout,
                        "sessions": args.sessions,
                        "steps": steps,
                        "pure_decode_steps": sum(s.pure_decode for s in observer.steps),
                        "foldable": folds,
                        "foldable_within_scrape_tick": folds_in_tick,
                        "ideal_reduction": round(steps / max(1, steps - folds), 2),
                        "ideal_reduction_with_scrapes": round(steps / max(1, steps - folds_in_tick), 2),
                    }
                )
            )


if __name__ == "__main__":
    main()
