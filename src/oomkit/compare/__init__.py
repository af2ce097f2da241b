"""`oomkit compare`: one factor at a time. An experiment is a baseline and variants that each
change exactly one factor; cells are measured on the same request set with the prefix cache reset
between them, repeated, and judged per metric: better, worse, same, or inconclusive."""

from oomkit.compare.cells import Cell
from oomkit.compare.factors import FACTORS, Factor
from oomkit.compare.preset import PRESETS, Preset, cache_vs_context
from oomkit.compare.run import CompareOptions, CompareResult, compare
from oomkit.compare.spec import ExperimentSpec, Mode, VariantSpec, load_experiment, parse_experiment, plan_experiment
from oomkit.compare.verdict import METRICS, MetricVerdict, compare_modes, judge

__all__ = [
    "Cell",
    "CompareOptions",
    "CompareResult",
    "ExperimentSpec",
    "FACTORS",
    "Factor",
    "METRICS",
    "MetricVerdict",
    "Mode",
    "PRESETS",
    "Preset",
    "VariantSpec",
    "cache_vs_context",
    "compare",
    "compare_modes",
    "judge",
    "load_experiment",
    "parse_experiment",
    "plan_experiment",
]
