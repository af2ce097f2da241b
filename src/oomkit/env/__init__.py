"""Environment evidence: what this machine (or a captured one) runs, and how it matches a vLLM
recipe. `take_snapshot()` and `load_snapshot_from_dir()` build an EnvSnapshot; `check_recipe()`
compares it with a recipe; `build_commands()` prints the `vllm serve` lines a recipe implies."""

from oomkit.env.check import CheckReport, CheckRow, check_recipe
from oomkit.env.command import CommandPlan, NodeCommand, build_commands, render_commands
from oomkit.env.model import DriverInfo, EnvSnapshot, GpuInfo, HostInfo, RdmaDevice, Software, Topology
from oomkit.env.recipe import Recipe, load_recipe
from oomkit.env.render import render_check, render_snapshot
from oomkit.env.snapshot import load_snapshot_from_dir, take_snapshot

__all__ = [
    "CheckReport",
    "CheckRow",
    "CommandPlan",
    "DriverInfo",
    "EnvSnapshot",
    "GpuInfo",
    "HostInfo",
    "NodeCommand",
    "RdmaDevice",
    "Recipe",
    "Software",
    "Topology",
    "build_commands",
    "check_recipe",
    "load_recipe",
    "load_snapshot_from_dir",
    "render_check",
    "render_commands",
    "render_snapshot",
    "take_snapshot",
]
