"""The fixed split of corpus/logs into `dev` (rules may be written while looking at these) and
`heldout` (scored only): a case is heldout when sha256(SEED + id) mod 100 < HELDOUT_PCT, so adding
logs never moves a case that is already placed. Writes corpus/split.json.

    .venv/bin/python corpus/split.py"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SEED = "oomkit-triage-split-1"
HELDOUT_PCT = 35  # >= 30% of the cases, with room for small-sample noise
HERE = Path(__file__).resolve().parent


def part_of(case_id: str) -> str:
    digest = hashlib.sha256(f"{SEED}:{case_id}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PCT else "dev"


def main() -> None:
    ids = sorted(p.stem for p in (HERE / "logs").glob("*.json"))
    cases = {case_id: part_of(case_id) for case_id in ids}
    counts = {part: sum(1 for v in cases.values() if v == part) for part in ("dev", "heldout")}
    body = {"seed": SEED, "heldout_pct": HELDOUT_PCT, "counts": counts, "cases": cases}
    (HERE / "split.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    print(f"{len(ids)} cases: {counts}")


if __name__ == "__main__":
    main()
