"""`oomkit launch PROFILE [--check] [--json]` and `oomkit launch --stop RUN`."""

from __future__ import annotations

import click

from oomkit.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError
from oomkit.fsio import dumps


@click.command("launch")
@click.argument("profile", required=False, type=click.Path(dir_okay=False))
@click.option("--check", is_flag=True, help="Start, wait for ready, send one short request, stop, report.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (progress goes to stderr).")
@click.option(
    "--runs-dir",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where run folders are created.",
)
@click.option("--label", help="Name for the run folder (default: the profile's label).")
@click.option("--stop", "stop_ref", metavar="RUN", help="Stop a running launch (run folder or run id).")
@click.pass_context
def command(
    ctx: click.Context,
    profile: str | None,
    check: bool,
    as_json: bool,
    runs_dir: str,
    label: str | None,
    stop_ref: str | None,
) -> None:
    """Start vLLM from a launch PROFILE, follow every startup phase, and record a run folder.

    Without --check it serves until Ctrl-C, SIGTERM or `oomkit launch --stop RUN`, then stops the
    whole process group and verifies that no worker survives. Exit 0 healthy, 1 failed, 2 bad input.
    """
    from oomkit.launch import check_profile, serve, stop_run
    from oomkit.launch.render import render_event, render_result

    if stop_ref:
        if profile:
            raise UsageError("give either PROFILE or --stop RUN, not both")
        outcome = stop_run(stop_ref, runs_dir)
        click.echo(dumps(outcome.to_dict()) if as_json else f"{outcome.run_dir}: {outcome.state} ({outcome.how})")
        ctx.exit(EXIT_OK)
    if not profile:
        raise UsageError("missing PROFILE", hint="e.g. oomkit launch examples/testbed-healthy.yaml --check")

    def on_event(event: object) -> None:
        line = render_event(event)  # type: ignore[arg-type]
        if line:
            click.echo(line, err=as_json)

    if check:
        checked = check_profile(profile, runs_dir=runs_dir, label=label, on_event=on_event)
        result, data, request = checked.launch, checked.to_dict(), checked.to_dict()["request"]
        code = EXIT_OK if checked.healthy else EXIT_FAILED
    else:
        result = serve(profile, runs_dir=runs_dir, label=label, on_event=on_event)
        data, request = result.to_dict(), None
        code = {"complete": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(result.state, EXIT_FAILED)
    click.echo(dumps(data) if as_json else render_result(result, request))
    ctx.exit(code)
