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
    bad = subprocess.run([sys.executable, "-m", "oomkit", "no-such-command"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
