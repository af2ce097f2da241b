"""oomkit triage PATH... : in which phase did this vLLM deployment fail, with evidence."""

from __future__ import annotations

import json

import click

from oomkit.redact import redact
from oomkit.triage import analyse
from oomkit.triage.render import render


@click.command("triage")
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object (with --each: one per line).")
@click.option("--each", is_flag=True, help="Triage every path on its own instead of as one deployment.")
def command(paths: tuple[str, ...], as_json: bool, each: bool) -> None:
    """Say in which phase a vLLM deployment failed, from its logs.

    PATHS are log files, folders (one log per rank, node or pod, merged in time order), .gz files,
    or - for stdin. Several paths are one deployment unless --each is given. Works offline: no GPU
    or server needed. Exit 0 when analysed (whatever the verdict), 2 when the input is unusable."""
    groups = [[p] for p in paths] if each else [list(paths)]
    for i, group in enumerate(groups):
        res = analyse(group)
        if as_json:
            click.echo(redact(json.dumps(res.to_dict(), ensure_ascii=False, indent=None if each else 2)))
            continue
        if each:
            click.echo(("\n" if i else "") + f"== {group[0]}")
        click.echo(render(res))
