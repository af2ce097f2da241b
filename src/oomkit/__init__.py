"""oomkit: find where vLLM ran out of memory, plan memory, measure, and decide tune or expand."""

__version__ = "0.1.0"
