"""The decision rules, in the method's order: the first that fires gives the verdict. Each rule
returns the numbers behind it and the evidence (files, lines, metric deltas). The checks live in
two families: `failure_rules` (what broke before capacity can be judged) and `capacity_rules`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oomkit.decide.capacity_rules import concurrency, fallback, one_request, team_gate
from oomkit.decide.facts import DecisionFacts
from oomkit.decide.failure_rules import environment, graph_capture, kv_startup, load_phase, not_memory, setup_rejects
from oomkit.decide.fired import Ctx, Fired
from oomkit.decide.model import Verdict

__all__ = ["RULES", "Ctx", "Fired", "Rule", "apply"]


@dataclass(frozen=True)
class Rule:
    id: str
    says: tuple[Verdict, ...]
    check: Callable[[DecisionFacts, Ctx], Fired | None]
    text: str
    source: str


RULES: tuple[Rule, ...] = (
    Rule(
        "environment_mismatch",
        ("fix_environment",),
        environment,
        "an environment mismatch comes first",
        "the method; triage phases environment/network_communication",
    ),
    Rule(
        "setup_rejects_requests",
        ("fix_environment",),
        setup_rejects,
        "a request the workload needs is refused by the launch command",
        "ladder failure kind bad_request",
    ),
    Rule(
        "not_a_memory_failure",
        ("fix_environment",),
        not_memory,
        "a failure that is not an OOM is fixed before capacity is judged",
        "the method (hard negatives: not every crash is an OOM); triage phase not_oom_other",
    ),
    Rule(
        "load_phase_oom",
        ("change_topology", "expand"),
        load_phase,
        "a load-phase OOM on a verified environment means topology or expansion",
        "the method; triage advice",
    ),
    Rule(
        "graph_capture_oom", ("tune",), graph_capture, "graph capture OOM is a margin setting", "vllm-internals.md §3"
    ),
    Rule(
        "kv_pool_below_one_request",
        ("tune", "change_topology", "expand"),
        kv_startup,
        "max_model_len against the KV pool, with vLLM's own estimate",
        "cpu-testbed.md §1",
    ),
    Rule(
        "one_target_request_fails",
        ("tune", "change_topology", "expand"),
        one_request,
        "one target request failing in a clean environment means capacity or topology",
        "the method",
    ),
    Rule(
        "team_criteria",
        ("tune", "inconclusive", "fix_environment"),
        team_gate,
        "the team's criteria from the choice matrix",
        "the method's choice matrix",
    ),
    Rule(
        "concurrency_headroom",
        ("tune", "expand", "inconclusive"),
        concurrency,
        "one passing and several failing means lower concurrency and measure headroom; expand if the headroom "
        "at the target is below the reserve",
        "the method",
    ),
    Rule("not_enough_evidence", ("inconclusive",), fallback, "no rule could judge the evidence", "oomkit"),
)


def apply(f: DecisionFacts, ctx: Ctx) -> tuple[Rule, Fired]:
    for rule in RULES:
        if rule.id == "concurrency_headroom" and not ctx.team.capacity:
            continue
        fired = rule.check(f, ctx)
        if fired is not None:
            return rule, fired
    raise AssertionError("the fallback rule always fires")
