"""Time to verdict: `oomkit investigate` end to end on the CPU testbed, per stage, with the server
starts and restarts counted (only server-side modes may restart vLLM).

    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/time_to_verdict.py [--profile P] [--repeats N] [--runs R]

Default profile: testbed-small-kv with the tool-call parser on (the workload's tool step names a
tool); `--profile examples/testbed-hybrid.yaml` adds the retention comparison (one restart).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from oomkit.investigate import InvestigateOptions, investigate  # noqa: E402


def tools_profile(out: Path, base: Path) -> Path:
    data = yaml.safe_load(base.read_text())
    data["args"].update(enable_auto_tool_choice=True, tool_call_parser="hermes")
    path = out / f"{base.stem}-tools.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(REPO / "examples" / "testbed-small-kv.yaml"))
    ap.add_argument("--requirements", default=str(REPO / "examples" / "requirements-testbed.yaml"))
    ap.add_argument("--repeats", type=int, default=2, help="cells per compared mode")
    ap.add_argument("--runs", type=int, default=1, help="investigations in a row (verdicts must agree)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oomkit-ttv-") as tmp:
        profile = tools_profile(Path(tmp), Path(a.profile))
        rows = []
        for i in range(a.runs):
            began = time.monotonic()
            r = investigate(str(profile), a.requirements, InvestigateOptions(repeats=a.repeats, runs_dir=f"{tmp}/runs"))
            rows.append(
                {
                    "run": i + 1,
                    "verdict": r.verdict,
                    "rule": r.rule,
                    "wall_s": round(time.monotonic() - began, 1),
                    "stages_s": r.timings_s,
                    "server_starts": r.server_starts,
                    "restarts": r.restarts,
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
