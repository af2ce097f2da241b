"""What each recipe strategy means as a vLLM layout, and how vLLM starts it across nodes.
Data plus the arithmetic from GPUs per node to TP/PP/DP sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass

_RECIPES = "vllm-project/recipes strategy names; sizes as in the K3 recipe comments (TP8, TEP16, TP8xPP2, DEP16)"


@dataclass(frozen=True)
class Strategy:
    name: str
    multi_node: bool
    tp: str  # "node": GPUs per node, "all": every GPU, "one"
    pp: str  # "nodes" or "one"
    dp: str  # "node", "all", "nodes" or "one"
    expert_parallel: bool
    disaggregated: bool = False
    source: str = _RECIPES


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("single_node_tp", False, "node", "one", "one", False),
        Strategy("single_node_tep", False, "node", "one", "one", True),
        Strategy("single_node_dep", False, "one", "one", "node", True),
        Strategy("multi_node_tp", True, "all", "one", "one", False),
        Strategy("multi_node_tep", True, "all", "one", "one", True),
        Strategy("multi_node_tp_pp", True, "node", "nodes", "one", False),
        Strategy("multi_node_dep", True, "one", "one", "all", True),
        Strategy("multi_node_tp_dp", True, "node", "one", "nodes", False),
        Strategy(
            "pd_cluster",
            True,
            "node",
            "one",
            "one",
            True,
            disaggregated=True,
            source=f"{_RECIPES}; pools from strategy_overrides.pd_cluster.prefill/decode",
        ),
    )
}

# Pool parallelism names in `strategy_overrides.pd_cluster.{prefill,decode}.parallelism`.
POOL_STRATEGY = {"tp": "single_node_tp", "tep": "single_node_tep", "dep": "single_node_dep"}

# First vLLM with `--nnodes/--node-rank` for the multiprocessing executor: absent from the 0.11.0
# sdist, present in 0.11.1 (`vllm/engine/arg_utils.py`, checked). Older builds need Ray.
NNODES_SINCE = "0.11.1"
# `--headless` with `--data-parallel-start-rank`: present in 0.11.0 (checked; older not read).
DP_HEADLESS_SINCE = "0.11.0"
DP_RPC_PORT = 13345  # the port vLLM's data-parallel deployment docs use
RAY_PORT = 6379


@dataclass(frozen=True)
class Layout:
    strategy: str
    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    dp: int
    expert_parallel: bool

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def dp_local(self) -> int:
        return max(self.dp // self.nodes, 1)

    def parallel_args(self) -> list[str]:
        args: list[str] = []
        if self.tp > 1:
            args += ["--tensor-parallel-size", str(self.tp)]
        if self.pp > 1:
            args += ["--pipeline-parallel-size", str(self.pp)]
        if self.dp > 1:
            args += ["--data-parallel-size", str(self.dp)]
        if self.expert_parallel:
            args += ["--enable-expert-parallel"]
        return args


def nodes_needed(strategy: Strategy, min_gpus: int, gpus_per_node: int) -> int:
    if not strategy.multi_node:
        return 1
    return max(2, math.ceil(min_gpus / max(gpus_per_node, 1)))


def layout(
    strategy: Strategy, gpus_per_node: int, min_gpus: int, tp_override: int | None = None, nodes: int | None = None
) -> Layout:
    n = nodes or nodes_needed(strategy, min_gpus, gpus_per_node)
    total = n * gpus_per_node
    size = {"node": gpus_per_node, "all": total, "nodes": n, "one": 1}
    tp = tp_override or size[strategy.tp]
    return Layout(strategy.name, n, gpus_per_node, tp, size[strategy.pp], size[strategy.dp], strategy.expert_parallel)
