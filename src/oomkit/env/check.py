"""The recipe check: one row per requirement the recipe states (or implies), what this
environment has, pass/fail/unknown, and why it matters. Unknown is a value, never a pass."""

from __future__ import annotations

import os
from dataclasses import dataclass

from oomkit.env import rows
from oomkit.env.model import EnvSnapshot
from oomkit.env.recipe import Recipe, load_recipe, read_prose
from oomkit.env.rows import FAIL, PASS, UNKNOWN, Status
from oomkit.env.settings import Asked, resolve, select
from oomkit.env.strategies import STRATEGIES, nodes_needed
from oomkit.redact import redact, redact_env
from oomkit.serial import JsonObject, to_json_object, to_jsonable


@dataclass(frozen=True)
class CheckRow:
    requirement: str
    found: str
    status: Status
    why: str
    source: str  # where the requirement comes from: a recipe key, its prose, or "oomkit"


@dataclass(frozen=True)
class CheckReport:
    recipe: str
    recipe_path: str
    strategy: str
    hardware: str | None
    variant: str
    rows: tuple[CheckRow, ...]
    args: tuple[str, ...]  # what the recipe sets for this hardware/strategy (without layout flags)
    env: dict[str, str]
    snapshot_source: str

    @property
    def overall(self) -> Status:
        statuses = {r.status for r in self.rows}
        return FAIL if FAIL in statuses else (UNKNOWN if UNKNOWN in statuses or not self.rows else PASS)

    @property
    def passed(self) -> bool:
        return self.overall == PASS

    def to_dict(self) -> JsonObject:
        out = to_json_object(self)
        out["overall"] = self.overall
        out["args"] = [redact(a) for a in self.args]
        out["env"] = to_jsonable(redact_env(self.env))
        out["rows"] = [{k: redact(v) for k, v in vars(r).items()} for r in self.rows]
        return out


def check_recipe(
    recipe: Recipe | str | os.PathLike[str],
    snapshot: EnvSnapshot,
    strategy: str | None = None,
    hardware: str | None = None,
    variant: str | None = None,
    features: tuple[str, ...] = (),
) -> CheckReport:
    rec = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    sel = select(rec, snapshot, Asked(strategy, hardware, variant, features))
    prose = read_prose(rec)
    settings = resolve(rec, sel)
    strat = STRATEGIES[sel.strategy]
    gpus = snapshot.visible_gpus
    floor = rows.floor(rec, sel)
    nodes = nodes_needed(strat, floor or len(gpus), len(gpus)) if gpus else (2 if strat.multi_node else 1)
    found = [
        rows.vllm_version(rec, snapshot),
        rows.vllm_pin(prose, snapshot),
        rows.build(prose, snapshot, sel.hardware),
        rows.driver(prose, snapshot, sel.hardware),
        rows.driver_cuda(snapshot, sel.hardware),
        rows.gpu_model(rec, sel, snapshot),
        rows.variant_hardware(rec, sel),
        rows.strategy_hardware(rec, sel),
        rows.gpu_count(rec, sel, snapshot, nodes),
        rows.capacity(rec, sel, snapshot, nodes),
        rows.mig(snapshot),
        rows.interconnect(strat, snapshot),
        rows.all2all(prose, strat, snapshot, settings.args),
        rows.env_conflicts(settings.env, snapshot),
        rows.other_nodes(strat, nodes, snapshot),
    ]
    return CheckReport(
        recipe=rec.name,
        recipe_path=str(recipe) if not isinstance(recipe, Recipe) else rec.name,
        strategy=sel.strategy,
        hardware=sel.hardware,
        variant=sel.variant,
        rows=tuple(CheckRow(*r) for r in found if r is not None),
        args=tuple(settings.args),
        env=dict(settings.env),
        snapshot_source=_source(snapshot),
    )


def _source(snapshot: EnvSnapshot) -> str:
    if snapshot.source == "captured" and snapshot.files:
        return "captured: " + os.path.dirname(snapshot.files[0][1])
    return snapshot.source
