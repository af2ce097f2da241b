"""`oomkit runs`: the run folders under --runs-dir, their state, and how to resume each."""

from __future__ import annotations

import json

import click

from oomkit.redact import redact
from oomkit.runs import LIST_STATES, list_runs, render


@click.command("runs")
@click.option("--runs-dir", default="runs", show_default=True)
@click.option("--state", type=click.Choice(LIST_STATES), help="Only runs in this state.")
@click.option(
    "--all",
    "include_parts",
    is_flag=True,
    help="Also list folders that are part of another run (a compare's servers, an investigation's).",
)
@click.option(
    "--fix", is_flag=True, help="Mark runs whose owner is gone as interrupted (owner_gone) in their manifest."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
def command(runs_dir, state, include_parts, fix, as_json):
    """List run folders: kind, state (a run whose oomkit died is interrupted), and the resume command."""
    runs = list_runs(runs_dir, state, include_parts, fix)
    text = json.dumps([r.to_dict() for r in runs], indent=2, default=str) if as_json else render(runs)
    click.echo(redact(text))
