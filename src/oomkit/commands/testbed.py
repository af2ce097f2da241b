"""`oomkit testbed create [DIR]` and `oomkit testbed profiles DIR`."""

from __future__ import annotations

import click

from oomkit.fsio import dumps


@click.group("testbed")
def command() -> None:
    """The embedded testbed: tiny random models and profiles for the real vLLM CPU engine."""


@command.command("create")
@click.argument("out_dir", required=False, type=click.Path(file_okay=False))
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["llama", "qwen3next"]),
    help="Build only these models (default: all).",
)
@click.option("--force", is_flag=True, help="Rebuild models that already exist.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def create(out_dir: str | None, kinds: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Write tiny random models (locally trained tokenizer, chat template, random safetensors; no
    downloads) and launch profiles that use them. Without OUT_DIR: the default location that
    examples/testbed-*.yaml read ($OOMKIT_TESTBED_DIR or ~/.cache/oomkit/testbed)."""
    from oomkit.testbed import KINDS, create_testbed

    bed = create_testbed(out_dir, kinds=kinds or KINDS, force=force)
    if as_json:
        click.echo(dumps(bed.to_dict()))
        return
    for kind, path in bed.models.items():
        click.echo(f"{'built' if kind in bed.built else 'kept '}  {kind:<10} {path}")
    for path in bed.profiles:
        click.echo(f"profile {path}")
    click.echo(f"next: oomkit launch {bed.profiles[0]} --check")


@command.command("profiles")
@click.argument("out_dir", type=click.Path(file_okay=False))
def profiles(out_dir: str) -> None:
    """Write the testbed profiles (model: testbed:<kind>) to OUT_DIR; examples/ is made this way."""
    from oomkit.testbed import write_profiles

    for path in write_profiles(out_dir):
        click.echo(str(path))
