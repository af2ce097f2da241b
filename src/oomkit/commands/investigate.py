"""`oomkit investigate`: env, launch, ladder, comparisons, decide and report in one resumable command."""

from __future__ import annotations

import json
import sys

import click

from oomkit.decide import TEAMS
from oomkit.investigate import InvestigateOptions, investigate
from oomkit.loadrun.progress import LineProgress
from oomkit.redact import redact


@click.command("investigate")
@click.argument("profile")
@click.option("--requirements", required=True, help="Requirements YAML (see examples/requirements-testbed.yaml).")
@click.option("--workload", help="Workload YAML or request set (default: the requirements' workload).")
@click.option("--team", type=click.Choice(list(TEAMS)), default="production", show_default=True)
@click.option("--repeats", type=int, default=2, show_default=True, help="Cells per compared mode.")
@click.option("--recipe", help="vLLM recipe YAML to check the environment against.")
@click.option("--resume", help="An investigation folder to continue.")
@click.option("--runs-dir", default="runs", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(profile, requirements, workload, team, repeats, recipe, resume, runs_dir, as_json):
    """The main job: from a launch profile and the requirement to the verdict and report.html."""
    say = None if as_json else (lambda text: click.echo(redact(text), err=True))
    opts = InvestigateOptions(
        workload,
        team,
        repeats,
        runs_dir,
        resume,
        recipe,
        on_event=say,
        progress=LineProgress(sys.stderr, enabled=not as_json),
    )
    r = investigate(profile, requirements, opts)
    click.echo(
        redact(json.dumps(r.to_dict(), indent=2, default=str))
        if as_json
        else redact(
            f"verdict: {r.verdict} ({r.rule})\nwhy:     {r.summary}\nreport:  {r.report_html}\n"
            f"time to verdict: {sum(r.timings_s.values()):.0f} s, server starts {r.server_starts}, restarts {r.restarts}"
        )
    )
