"""The vLLM memory planner: predict vLLM's per-GPU memory, KV pool and verdicts for a model, GPU
and layout. `plan(PlanRequest(...))` is the entry point; `compare` ranks layouts; `calibrate`
fits a deployment's non-KV overhead from a real startup log."""

from oomkit.plan.catalog import find_gpu, find_model, gpus, model_names
from oomkit.plan.core import Plan, PlanRequest, plan
from oomkit.plan.layouts import Layout

__all__ = ["Layout", "Plan", "PlanRequest", "find_gpu", "find_model", "gpus", "model_names", "plan"]
