"""Triage accuracy per phase against a labelled folder.

    python benchmarks/triage_accuracy.py ../shared/fixtures/vllm-logs
    python benchmarks/triage_accuracy.py ../shared/research/cpu-logs --labels benchmarks/cpu_log_labels.json

A labelled folder holds NNN.log with NNN.json ({"label": {"phase": ...}}), or logs plus a
--labels file mapping file name to phase. Prints a per-phase table, the misses, and the total."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from oomkit.errors import OomkitError
from oomkit.triage import analyse


def load_cases(folder: Path, labels: Path | None) -> list[tuple[Path, str]]:
    if labels is not None:
        table = json.loads(labels.read_text())
        return [(folder / name, phase) for name, phase in sorted(table.items()) if (folder / name).exists()]
    cases = []
    for log in sorted(folder.glob("*.log")):
        side = log.with_suffix(".json")
        if side.exists():
            cases.append((log, json.loads(side.read_text())["label"]["phase"]))
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--labels", type=Path, help="JSON {file name: phase} instead of sidecar files")
    args = ap.parse_args(argv)
    cases = load_cases(args.folder, args.labels)
    if not cases:
        print(f"no labelled logs in {args.folder}", file=sys.stderr)
        return 2
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses = []
    for log, want in cases:
        try:
            res = analyse([str(log)])
            got, conf = res.verdict.phase, res.verdict.confidence
        except OomkitError as err:
            got, conf = f"error: {err.one_line()}", "-"
        per[want][1] += 1
        per[want][0] += got == want
        if got != want:
            misses.append((log.name, want, got, conf))
    print(f"{'phase':<24}{'right':>6}{'cases':>6}{'accuracy':>10}")
    for phase in sorted(per):
        right, n = per[phase]
        print(f"{phase:<24}{right:>6}{n:>6}{right / n:>10.0%}")
    total_right = sum(r for r, _ in per.values())
    print(f"{'TOTAL':<24}{total_right:>6}{len(cases):>6}{total_right / len(cases):>10.1%}")
    for name, want, got, conf in misses:
        print(f"miss: {name}: labelled {want}, triage said {got} ({conf} confidence)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
