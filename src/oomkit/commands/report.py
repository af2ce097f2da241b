"""`oomkit report`: a decision or a run as a self-contained HTML page, Markdown or JSON."""

from __future__ import annotations

import click

from oomkit.report import FORMATS, render


@click.command("report")
@click.argument("run_or_decision")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="html", show_default=True)
@click.option("-o", "--output", help="File to write (default: report.<format> in the folder).")
@click.option("--runs-dir", default="runs", show_default=True)
def command(run_or_decision, fmt, output, runs_dir):
    """Charts, verdict, checklist, environment, launch command and the untested scenarios."""
    click.echo(render(run_or_decision, fmt, output, runs_dir))
