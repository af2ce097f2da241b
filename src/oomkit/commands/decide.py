"""`oomkit decide`: the tune-or-expand verdict from evidence runs and the requirement in numbers."""

from __future__ import annotations

import json

import click

from oomkit.decide import TEAMS, DecideOptions, decide
from oomkit.decide.render import render
from oomkit.redact import redact


@click.command("decide")
@click.argument("runs", nargs=-1, required=True)
@click.option("--requirements", required=True, help="Requirements YAML (see examples/requirements-testbed.yaml).")
@click.option("--team", type=click.Choice(list(TEAMS)), default="production", show_default=True)
@click.option("--recipe", help="vLLM recipe YAML to check the recorded environment against.")
@click.option(
    "--runs-dir", default="runs", show_default=True, help="Where run ids are looked up; the decision goes here."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(runs, requirements, team, recipe, runs_dir, as_json):
    """fix_environment, tune, change_topology, expand or inconclusive: the rule, numbers and evidence."""
    d = decide(list(runs), requirements, DecideOptions(team, runs_dir, recipe)).to_dict()
    click.echo(redact(json.dumps(d, indent=2, default=str)) if as_json else redact(render(d)))
