"""`oomkit env`: the environment snapshot, the recipe check, and the command a recipe implies."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import click

from oomkit.errors import EXIT_FAILED, UsageError
from oomkit.fsio import dumps
from oomkit.serial import JsonObject


@click.command("env")
@click.option(
    "--from",
    "from_dir",
    type=click.Path(path_type=Path),
    help="Read a captured environment (nvidia-smi -q -x, topo -m, pip list, env) from DIR.",
)
@click.option("--python", "python", metavar="PATH", help="Read the vLLM build of this interpreter instead.")
@click.option("--recipe", type=click.Path(path_type=Path), help="Check against a vLLM recipes YAML file.")
@click.option("--strategy", metavar="NAME", help="Recipe strategy (default: the recipe's default).")
@click.option("--hardware", metavar="NAME", help="Recipe hardware key, e.g. gb300 (default: the GPUs seen).")
@click.option("--variant", metavar="NAME", help="Recipe variant (default: default).")
@click.option("--feature", "features", metavar="NAME", multiple=True, help="Opt-in recipe feature; repeatable.")
@click.option("--print-command", is_flag=True, help="Print the vllm serve command(s) and env the recipe implies.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def command(
    ctx: click.Context,
    from_dir: Path | None,
    python: str | None,
    recipe: Path | None,
    strategy: str | None,
    hardware: str | None,
    variant: str | None,
    features: tuple[str, ...],
    print_command: bool,
    as_json: bool,
) -> None:
    """Snapshot the driver, GPUs, topology, vLLM build and host; check them against a recipe."""
    from oomkit import env

    if recipe is None and (strategy or hardware or variant or features or print_command):
        raise UsageError(
            "--strategy, --hardware, --variant, --feature and --print-command need --recipe", "add --recipe RECIPE.yaml"
        )
    if from_dir is not None and python is not None:
        raise UsageError("--from and --python both say where the packages come from", "pass only one")
    snap = env.load_snapshot_from_dir(from_dir) if from_dir else env.take_snapshot(python=python)
    width = shutil.get_terminal_size((100, 24)).columns
    if recipe is None:
        _echo(snap.to_dict(), as_json, lambda: env.render_snapshot(snap, width))
    elif print_command:
        plan = env.build_commands(recipe, snap, strategy, hardware, variant, features)
        _echo(plan.to_dict(), as_json, lambda: env.render_commands(plan))
    else:
        report = env.check_recipe(recipe, snap, strategy, hardware, variant, features)
        _echo({**report.to_dict(), "snapshot": snap.to_dict()}, as_json, lambda: env.render_check(report, width))
        if not report.passed:
            ctx.exit(EXIT_FAILED)  # the check ran and did not pass (unknown rows included)


def _echo(data: JsonObject, as_json: bool, text: Callable[[], str]) -> None:
    click.echo(dumps(data) if as_json else text(), nl=as_json)
