"""Cell functions for tests/test_scaleout.py: module-level so spawned processes and Ray workers can
import them."""

from __future__ import annotations

import os
import random


def seeded_walk(cell: dict[str, int]) -> list[float]:
    """A deterministic result from the cell's seed: equal on every back end."""
    rng = random.Random(cell["seed"])
    return [round(rng.random() * cell["scale"], 6) for _ in range(5)]


def fails_on_odd(cell: dict[str, int]) -> int:
    if cell["seed"] % 2:
        raise ValueError(f"odd seed {cell['seed']}")
    return cell["seed"]


def dies_on_seed_one(cell: dict[str, int]) -> int:
    """The worker process itself dies, as under an OOM kill."""
    if cell["seed"] == 1:
        os._exit(137)
    return cell["seed"]
