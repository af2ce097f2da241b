"""Start and stop a background sampling loop (shared by the /metrics scraper and memory sampler)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


def start_loop(loop: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
    return asyncio.create_task(loop())


async def stop_loop(task: asyncio.Task[None] | None) -> None:
    """Cancel the loop and wait for it; nothing to do for a loop that never started."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
