"""The CLI assembles commands lazily: each module in COMMAND_MODULES defines the command of its name."""

import importlib
import subprocess
import sys

import pytest

from oomkit.cli import COMMAND_MODULES


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_module_defines_its_command(name):
    assert importlib.import_module(f"oomkit.commands.{name}").command.name == name


def test_help_lists_every_command_and_unknown_is_exit_2():
    out = subprocess.run([sys.executable, "-m", "oomkit", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and all(name in out.stdout for name in COMMAND_MODULES)
    bad = subprocess.run(
        [sys.executable, "-m", "oomkit", "no-such-command"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["triage", "x" * 5000],
        ["plan", "--model", "y" * 300, "--gpu", "B200", "--gpus", "8"],
        ["runs", "--runs-dir", "z" * 5000],
    ],
)
def test_a_path_the_os_refuses_is_one_line_and_exit_2(args):
    """A file name too long for the file system (ENAMETOOLONG) is an OSError that no reader expects."""
    out = subprocess.run([sys.executable, "-m", "oomkit", *args], capture_output=True, text=True, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("oomkit: error:"), out.stderr[-500:]
