"""Triage accuracy against labelled real logs, per part of a fixed split.

    python benchmarks/triage_accuracy.py corpus/logs                 # dev and heldout side by side
    python benchmarks/triage_accuracy.py corpus/logs --split heldout
    python benchmarks/triage_accuracy.py corpus/logs --split dev-ab   # dev-a (misses listed), dev-b, dev, heldout
    python benchmarks/triage_accuracy.py corpus/logs --collections a,d,h,m   # only cases whose id starts so
    python benchmarks/triage_accuracy.py ../shared/fixtures/vllm-logs
    python benchmarks/triage_accuracy.py tests/fixtures/cpu-logs --labels benchmarks/cpu_log_labels.json

A labelled folder holds X.log with X.json ({"label": {"phase", "is_oom", "confidence"}}), or logs
plus a --labels file mapping file name to phase. A folder with a split file (corpus/split.json, made
by corpus/split.py) is scored per part: `dev` is what rules may be written against, `heldout` is
only scored. `--split dev-a|dev-b|dev-ab` splits `dev` itself, by the case id's hash (DEV_A_SEED,
about 60% `dev-a`), for a change's own held-out check: misses are listed for `dev-a` only; a change
is designed from `dev-a`'s misses and kept only if `dev-b` and `heldout` do not drop. For each part: accuracy overall, per phase and on high-confidence labels; coverage (not
`unknown`); wrong answers (a wrong phase, not `unknown`); false OOM on logs labelled not OOM; a
confusion matrix (rows: label, columns: triage); right / wrong / unknown per deciding step, per label
confidence and per collection (the case id's letter, corpus/README.md): aggregates, so heldout's are
printed too, and show where the two parts differ."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from oomkit.errors import OomkitError
from oomkit.triage import analyse

DEV_A_SEED = "oomkit-triage-dev-ab-1"
DEV_A_PCT = 60
SOURCES = ("frames", "marker", "template", "context")


@dataclass(frozen=True)
class Case:
    log: Path
    phase: str
    is_oom: bool | None
    confidence: str | None


@dataclass(frozen=True)
class Answer:
    case: Case
    phase: str
    is_oom: bool
    confidence: str
    decided_by: str = "-"
    cause: str | None = None


def load_cases(folder: Path, labels: Path | None) -> list[Case]:
    if labels is not None:
        table = json.loads(labels.read_text())
        return [
            Case(folder / name, phase, None, None) for name, phase in sorted(table.items()) if (folder / name).exists()
        ]
    cases = []
    for log in sorted(folder.glob("*.log")):
        side = log.with_suffix(".json")
        if side.exists():
            label = json.loads(side.read_text())["label"]
            cases.append(Case(log, label["phase"], label.get("is_oom"), label.get("confidence")))
    return cases


def split_of(folder: Path) -> dict[str, str] | None:
    for candidate in (folder / "split.json", folder.parent / "split.json"):
        if candidate.exists():
            return json.loads(candidate.read_text())["cases"]
    return None


def answer(case: Case) -> Answer:
    try:
        verdict = analyse([str(case.log)]).verdict
        return Answer(case, verdict.phase, verdict.is_oom, verdict.confidence, verdict.decided_by, verdict.cause)
    except OomkitError as err:
        return Answer(case, f"error: {err.one_line()}", False, "-")


def dev_half(case_id: str) -> str:
    """`dev-a` (about DEV_A_PCT%) or `dev-b`, fixed by the id's hash: adding cases moves none."""
    digest = hashlib.sha256(f"{DEV_A_SEED}:{case_id}".encode()).digest()
    return "dev-a" if int.from_bytes(digest[:8], "big") % 100 < DEV_A_PCT else "dev-b"


def report(name: str, answers: list[Answer], *, list_misses: bool = True, by_rule: bool = False) -> list[str]:
    n = len(answers)
    right = [a for a in answers if a.phase == a.case.phase]
    covered = [a for a in answers if a.phase != "unknown"]
    wrong = [a for a in covered if a.phase != a.case.phase]
    high = [a for a in answers if a.case.confidence == "high"]
    not_oom = [a for a in answers if a.case.is_oom is False]
    false_oom = [a for a in not_oom if a.is_oom]
    lines = [
        f"== {name}: {n} logs",
        f"accuracy {len(right)}/{n} = {_pct(len(right), n)}; coverage {_pct(len(covered), n)}; "
        f"wrong {len(wrong)} = {_pct(len(wrong), n)}; high-confidence labels "
        f"{sum(a.phase == a.case.phase for a in high)}/{len(high)} = "
        f"{_pct(sum(a.phase == a.case.phase for a in high), len(high))}; false OOM {len(false_oom)}/{len(not_oom)}",
    ]
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for a in answers:
        per[a.case.phase][1] += 1
        per[a.case.phase][0] += a.phase == a.case.phase
    lines.append(f"{'phase':<24}{'right':>6}{'cases':>6}{'accuracy':>10}")
    lines += [f"{p:<24}{r:>6}{c:>6}{_pct(r, c):>10}" for p, (r, c) in sorted(per.items())]
    lines += _confusion(answers)
    lines += _by_source(answers)
    lines += _by_group(answers)
    if by_rule:
        lines += _by_rule(answers)
    misses = [a for a in answers if a.phase != a.case.phase]
    if not list_misses:
        # The held-out part is scored, never read: naming its misses would invite rules for them.
        return [*lines, f"misses: {len(misses)} (not listed: held-out cases are scored, not read)"]
    lines += [
        f"miss: {a.case.log.name}: labelled {a.case.phase}, triage said {a.phase} "
        f"({a.confidence}; {a.decided_by} {a.cause or '-'})"
        for a in misses
    ]
    return lines


def _confusion(answers: list[Answer]) -> list[str]:
    counts = Counter((a.case.phase, a.phase) for a in answers)
    labels = sorted({a.case.phase for a in answers})
    said = sorted({a.phase for a in answers})
    short = {p: p[:9] for p in said}
    out = ["confusion (rows: label, columns: triage):", f"{'':<22}" + "".join(f"{short[p]:>10}" for p in said)]
    out += [f"{row:<22}" + "".join(f"{counts.get((row, col), 0) or '.':>10}" for col in said) for row in labels]
    return out


def _by_source(answers: list[Answer]) -> list[str]:
    """Right / wrong / unknown per decision-order step (the verdict's decided_by)."""
    out = [f"{'decided by':<12}{'right':>6}{'wrong':>6}{'unknown':>8}{'cases':>6}{'right %':>9}"]
    for source in (*SOURCES, "-"):
        mine = [a for a in answers if a.decided_by == source]
        if mine:
            out.append(_tally_row(source, mine, 12))
    return out


def _by_group(answers: list[Answer]) -> list[str]:
    """Right / wrong / unknown per label confidence and per collection (the id's letter: corpus/README.md),
    aggregates only: where dev and heldout differ, a rule fitted one part's kind of case."""
    out = [f"{'label confidence':<18}{'right':>6}{'wrong':>6}{'unknown':>8}{'cases':>6}{'right %':>9}"]
    for conf in ("high", "medium", "low", None):
        mine = [a for a in answers if a.case.confidence == conf]
        if mine:
            out.append(_tally_row(conf or "-", mine, 18))
    out.append(f"{'collection':<18}{'right':>6}{'wrong':>6}{'unknown':>8}{'cases':>6}{'right %':>9}")
    for group in sorted({a.case.log.stem[0] for a in answers}):
        mine = [a for a in answers if a.case.log.stem[0] == group]
        out.append(_tally_row(f"{group}*", mine, 18))
    return out


def _by_rule(answers: list[Answer]) -> list[str]:
    """Right / wrong / unknown per deciding step and failure rule (the verdict's cause)."""
    keys = sorted({(a.decided_by, a.cause or "-") for a in answers})
    out = [f"{'decided by / rule':<32}{'right':>6}{'wrong':>6}{'unknown':>8}{'cases':>6}{'right %':>9}"]
    for source, cause in keys:
        mine = [a for a in answers if a.decided_by == source and (a.cause or "-") == cause]
        out.append(_tally_row(f"{source} {cause}", mine, 32))
    return out


def _tally_row(name: str, mine: list[Answer], width: int) -> str:
    right = sum(a.phase == a.case.phase for a in mine)
    unknown = sum(a.phase == "unknown" and a.case.phase != "unknown" for a in mine)
    wrong = len(mine) - right - unknown
    return f"{name:<{width}}{right:>6}{wrong:>6}{unknown:>8}{len(mine):>6}{_pct(right, len(mine)):>9}"


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--labels", type=Path, help="JSON {file name: phase} instead of sidecar files")
    ap.add_argument(
        "--split",
        choices=("dev", "heldout", "all", "both", "dev-a", "dev-b", "dev-ab"),
        default="both",
        help=(
            "with a split file: one part, all together, both side by side (default), or dev's own halves "
            "(dev-ab: dev-a, dev-b, dev and heldout; misses listed for dev-a only)"
        ),
    )
    ap.add_argument(
        "--collections",
        help=(
            "comma-separated id letters (corpus/README.md): score only those collections, e.g. the ones "
            "added since the rules were last changed, for a first score on cases no rule was written from"
        ),
    )
    args = ap.parse_args(argv)
    cases = load_cases(args.folder, args.labels)
    if args.collections:
        letters = tuple(x.strip() for x in args.collections.split(",") if x.strip())
        cases = [c for c in cases if c.log.stem.startswith(letters)]
    if not cases:
        print(f"no labelled logs in {args.folder}", file=sys.stderr)
        return 2
    split = split_of(args.folder) if args.labels is None else None
    parts = _parts(cases, split, args.split)
    listed_parts = {"dev-a"} if args.split == "dev-ab" else {"dev", "dev-a", "dev-b", "all"}
    answered = {c: answer(c) for c in {c for part in parts.values() for c in part}}
    scored = {name: [answered[c] for c in part] for name, part in parts.items()}
    for name, answers in scored.items():
        listed = report(
            f"{args.folder} [{name}]",
            answers,
            list_misses=name in listed_parts,
            by_rule=name in ("dev-a", "dev-b"),
        )
        print("\n".join(listed), end="\n\n")
    if {"dev", "heldout"} <= scored.keys():
        dev, held = (
            sum(a.phase == a.case.phase for a in scored[k]) / max(len(scored[k]), 1) for k in ("dev", "heldout")
        )
        print(f"heldout - dev accuracy: {100 * (held - dev):+.1f} points (goal: within 5)")
    return 0


def _parts(cases: list[Case], split: dict[str, str] | None, which: str) -> dict[str, list[Case]]:
    if not split or which == "all":
        return {"all": cases}
    parts = {part: [c for c in cases if split.get(c.log.stem) == part] for part in ("dev", "heldout")}
    halves = {h: [c for c in parts["dev"] if dev_half(c.log.stem) == h] for h in ("dev-a", "dev-b")}
    if which == "dev-ab":
        return {**halves, **parts}
    if which in halves:
        return {which: halves[which]}
    return {which: parts[which]} if which in parts else parts


if __name__ == "__main__":
    sys.exit(main())
