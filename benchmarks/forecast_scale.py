"""Forecast speed at production scale (issue 17, "Scale"): 1,000 agent sessions (20 steps each,
8k-token shared prefix, history growing to about 64k) whose starts are spread over a 10-minute
simulated window, on Kimi K3 8xGB300 TP8 and 16xGB300 DEP16. Goal: <= 2 minutes wall and <= 2 GB
RSS each on the 2-core dev machine. Each layout runs in a fresh process; wall and peak RSS are that
process's (vLLM's import included), steps/s is scheduler steps over the simulation's own wall time.

    .venv/bin/python benchmarks/forecast_scale.py                        # both layouts, full size
    .venv/bin/python benchmarks/forecast_scale.py --sessions 100 --layouts tp8
    .venv/bin/python benchmarks/forecast_scale.py --sessions 150 --save-json /tmp/before   # every figure, to diff

`--save-json DIR` writes each layout's whole forecast (`oomkit forecast --json`) to DIR/LAYOUT.json
with its wall-clock figures (`wall_s`) set to 0 and the workload's temporary path as `workload.yaml`,
so two runs of the same code give equal files and a speed-up can be checked to change no figure.

The forecast's own time limit (--time-limit, default 900 s) bounds each run: a layout that does not
finish in it is reported as cut, with how far it got.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LAYOUTS = {
    "tp8": {"tp": 8},
    "dep16": {"dp": 16, "ep": True},
}
WORKLOAD = {
    "name": "k3-agents-8k-prefix",
    "seed": 17,
    "steps": 20,
    "system_instruction_tokens": 7000,
    "format_rules_tokens": 500,
    "prefix_reuse": 1.0,
    "user_task_tokens": [100, 300],
    "workflow_metadata_tokens": 40,
    "tools": {"count": 10, "schema_tokens": 50},  # 7,500 + 500 = an 8k-token shared prefix
    "history": {"assistant_action_tokens": [100, 300], "tool_result_tokens": [2200, 3200]},  # ~64k at step 20
    "output_tokens": [200, 600],
    "ignore_eos": True,
}


def one(
    layout: str, sessions: int, window_s: float, time_limit_s: float, workload: str, save_json: str | None
) -> dict[str, object]:
    from oomkit.forecast import ForecastRequest, forecast
    from oomkit.plan import PlanRequest

    t0 = time.monotonic()
    req = ForecastRequest(
        plan=PlanRequest(model="kimi-k3", gpu="GB300", **LAYOUTS[layout]),  # type: ignore[arg-type]
        workload=workload,
        sessions=sessions,
        window_s=window_s,
        time_limit_s=time_limit_s,
    )
    f = forecast(req)
    if save_json:
        text = json.dumps(_without_wall(f.to_dict()), indent=1, sort_keys=True)
        # The workload's temporary path is in the traffic notes: the same name in every run.
        (Path(save_json) / f"{layout}.json").write_text(text.replace(workload, "workload.yaml"), encoding="utf-8")
    lay = f.layouts[0]
    rung = lay.rungs[0]
    return {
        "layout": lay.layout,
        "sessions": sessions,
        "engines": lay.engines,
        "verdict": rung.verdict,
        "requests_finished": rung.requests,
        "steps": rung.steps,
        "simulation_wall_s": round(rung.wall_s, 1),
        "steps_per_s": round(rung.steps / rung.wall_s, 1) if rung.wall_s else None,
        "simulated_s": round(rung.simulated_s, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "preemptions": rung.preemptions,
        "max_kv_usage": round(rung.max_kv_usage, 3),
        "prefix_hit_rate": rung.prefix_hit_rate and round(rung.prefix_hit_rate, 3),
        "ttft_ms_p50": rung.ttft_ms_p50 and round(rung.ttft_ms_p50),
        "itl_ms_p50": rung.itl_ms_p50 and round(rung.itl_ms_p50, 1),
        "notes": list(rung.notes),
    }


def _without_wall(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: 0 if k == "wall_s" else _without_wall(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_without_wall(v) for v in doc]
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--window-s", type=float, default=600.0)
    ap.add_argument("--layouts", default="tp8,dep16")
    ap.add_argument("--time-limit", type=float, default=900.0)
    ap.add_argument("--save-json", metavar="DIR", help="write each layout's whole forecast JSON here (wall_s 0)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one layout in this process
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.sessions, args.window_s, args.time_limit, args.workload, args.save_json)))
        return
    if args.save_json:
        Path(args.save_json).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / "workload.yaml"
        wl.write_text(yaml.safe_dump({**WORKLOAD, "sessions": args.sessions}), encoding="utf-8")
        for layout in args.layouts.split(","):
            cmd = [sys.executable, __file__, "--one", layout, "--workload", str(wl)]
            cmd += ["--sessions", str(args.sessions), "--window-s", str(args.window_s)]
            cmd += ["--time-limit", str(args.time_limit)]
            cmd += ["--save-json", str(Path(args.save_json).resolve())] if args.save_json else []
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
            result = json.loads(line) if line.startswith("{") else {"layout": layout, "error": out.stderr[-800:]}
            goal = "meets" if result.get("wall_s", 1e9) <= 120 and result.get("peak_rss_mib", 1e9) <= 2048 else "MISSES"
            print(json.dumps(result))
            print(f"{layout}: {goal} the goal (<= 120 s wall, <= 2048 MiB RSS)")


if __name__ == "__main__":
    main()
