"""The command line. Thin: each command parses options, calls one library function, renders.
This module only assembles the commands and is the one place that prints errors."""

from __future__ import annotations

import importlib
import sys

import click

from oomkit import __version__
from oomkit.errors import EXIT_INPUT, EXIT_INTERRUPTED, OomkitError
from oomkit.redact import redact

# Each entry is a module in oomkit.commands that defines `command` (a click command or group).
COMMAND_MODULES = (
    "triage",
    "launch",
    "testbed",
    "env",
    "plan",
    "forecast",
    "ladder",
    "bench",
    "compare",
    "decide",
    "report",
    "investigate",
    "runs",
)


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs: `oomkit triage` must not pay for
    the HTTP client, pydantic models or vLLM probes of the other commands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMAND_MODULES:
            return None
        return importlib.import_module(f"oomkit.commands.{cmd_name}").command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomkit")
def cli() -> None:
    """Find where vLLM ran out of memory, plan memory, measure, and decide: tune or expand."""


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="oomkit", standalone_mode=False)
    except OomkitError as err:
        click.echo(f"oomkit: error: {redact(err.one_line())}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("oomkit: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("oomkit: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_INPUT if err.exit_code == 2 else err.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:  # the OS refused a path or a write: a name too long, no permission, disk full
        where = f"{str(err.filename)[:200]}: " if err.filename is not None else ""
        click.echo(
            redact(f"oomkit: error: {where}{err.strerror or err} (check the path, its permissions and the free space)"),
            err=True,
        )
        sys.exit(EXIT_INPUT)
    sys.exit(code if isinstance(code, int) else 0)
