"""Options several commands share, declared once so their spelling and behaviour cannot drift."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def ray_option(what: str) -> Callable[[F], F]:
    """`--ray [ADDRESS]`: a flag with an optional value (empty string: RAY_ADDRESS, else a local
    Ray), stored as `ray_address`; `what` says what runs on Ray."""
    return click.option(
        "--ray",
        "ray_address",
        is_flag=False,
        flag_value="",
        default=None,
        metavar="[ADDRESS]",
        help=f"Run {what} on Ray: ADDRESS, else RAY_ADDRESS, else a local Ray (needs the ray extra).",
    )
