"""`oomkit compare`: one factor at a time, from an experiment file or the cache-vs-context preset."""

from __future__ import annotations

import json

import click

from oomkit.compare import CompareOptions, cache_vs_context, compare
from oomkit.compare.preset import PresetOptions
from oomkit.compare.render import render
from oomkit.errors import UsageError
from oomkit.redact import redact


def _spec(experiment, preset, profile, workload, concurrency, history_turns):
    if bool(experiment) == bool(preset):
        raise UsageError("give an EXPERIMENT file or --preset cache-vs-context (with --profile and --concurrency)")
    if experiment:
        return experiment, ()
    if not profile or not concurrency:
        raise UsageError("--preset needs --profile PROFILE and --concurrency N")
    p = cache_vs_context(profile, workload, concurrency, PresetOptions(history_turns=history_turns))
    return p.spec, p.notes


@click.command("compare")
@click.argument("experiment", required=False)
@click.option("--preset", type=click.Choice(["cache-vs-context"]), help="The method's three comparisons.")
@click.option("--profile", help="Launch profile (with --preset).")
@click.option("--workload", help="Workload YAML or request-set.jsonl (with --preset).")
@click.option("--concurrency", type=int, help="Target concurrency (with --preset).")
@click.option("--history-turns", type=int, default=1, show_default=True, help="Shorter history kept (with --preset).")
@click.option("--repeats", type=int, help="Cells per mode (default: the file's, else 2).")
@click.option("--url", help="Run against this server (client-side modes only).")
@click.option("--resume", help="A compare folder to continue.")
@click.option("--runs-dir", default="runs", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(experiment, preset, profile, workload, concurrency, history_turns, repeats, url, resume, runs_dir, as_json):
    """Baseline and one-factor variants on the same request set, with a noise-aware verdict per metric."""
    spec, notes = _spec(experiment, preset, profile, workload, concurrency, history_turns)
    say = None if as_json else (lambda text: click.echo(redact(text), err=True))
    result = compare(spec, CompareOptions(runs_dir, url, resume, repeats, on_event=say), notes=notes)
    click.echo(
        redact(json.dumps(result.to_dict(), indent=2, default=str))
        if as_json
        else redact(render(result.data, str(result.run_dir)))
    )
