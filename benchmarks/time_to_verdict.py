"""Time to verdict: `oomkit investigate` end to end on the CPU testbed, per stage, with the server
starts and restarts counted (only server-side modes may restart vLLM).

    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/time_to_verdict.py [--profile P] [--repeats N] [--runs R]

Default: the demo's investigation, testbed-hybrid-small-kv with the greedy testbed workload: all
three comparisons, the retention one on a second server (one restart). `--profile
examples/testbed-small-kv.yaml --workload examples/workload-testbed.yaml` is the llama testbed,
where retention does not apply (one server start).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from oomkit.investigate import InvestigateOptions, investigate  # noqa: E402


def _comparisons(compare_dir: str | None) -> list[str]:
    if not compare_dir:
        return []
    return list(json.loads((Path(compare_dir) / "compare.json").read_text())["comparisons"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(REPO / "examples" / "testbed-hybrid-small-kv.yaml"))
    ap.add_argument("--workload", default=str(REPO / "examples" / "workload-testbed-greedy.yaml"))
    ap.add_argument("--requirements", default=str(REPO / "examples" / "requirements-testbed.yaml"))
    ap.add_argument("--repeats", type=int, default=2, help="cells per compared mode")
    ap.add_argument("--runs", type=int, default=1, help="investigations in a row (verdicts must agree)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oomkit-ttv-") as tmp:
        rows = []
        for i in range(a.runs):
            began = time.monotonic()
            opts = InvestigateOptions(workload=a.workload, repeats=a.repeats, runs_dir=f"{tmp}/runs")
            r = investigate(a.profile, a.requirements, opts)
            rows.append(
                {
                    "run": i + 1,
                    "verdict": r.verdict,
                    "rule": r.rule,
                    "wall_s": round(time.monotonic() - began, 1),
                    "stages_s": r.timings_s,
                    "server_starts": r.server_starts,
                    "restarts": r.restarts,
                    "comparisons": sorted(_comparisons(r.run_dirs.get("compare"))),
                    "capacity": r.decision["numbers"].get("capacity_concurrency"),
                    "headroom_pct": r.decision["numbers"].get("headroom_pct"),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        same = len({(x["verdict"], x["rule"]) for x in rows}) == 1
        print(
            f"profile {Path(a.profile).name}, repeats {a.repeats}: time to verdict "
            f"{', '.join(str(x['wall_s']) for x in rows)} s; server starts {rows[0]['server_starts']}, restarts "
            f"{rows[0]['restarts']}; verdicts {'agree' if same else 'DIFFER'}: {rows[0]['verdict']}"
        )


if __name__ == "__main__":
    main()
