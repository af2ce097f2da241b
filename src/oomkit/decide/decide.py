"""`decide(runs, requirements)`: the verdict with the rule that fired, its numbers and evidence, the
checklist item by item and the team's criteria; written to a decision folder (kind `decision`)
with decision.json and retest.md, the procedure to measure again after a vLLM update."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oomkit import __version__
from oomkit.decide.checklist import Item, checklist, retest_item
from oomkit.decide.evidence import RunEvidence, load_all, written_by_oomkit
from oomkit.decide.facts import Capacity, DecisionFacts, Facts
from oomkit.decide.model import DecisionDoc, EvidenceDoc, InputDoc, Numbers, RuleDoc, TeamDoc, Verdict
from oomkit.decide.requirements import Requirements, load_requirements
from oomkit.decide.rules import Ctx, Fired, apply
from oomkit.decide.sizing import ForecastSizing, forecast_sizing
from oomkit.decide.teams import TEAMS, criteria
from oomkit.errors import UsageError
from oomkit.fsio import is_file, write_json_atomic, write_text_atomic
from oomkit.rundir import RunDir, redact_obj
from oomkit.serial import JsonObject

if TYPE_CHECKING:
    from oomkit.env.check import CheckReport

SCHEMA = "oomkit.decision/1"


@dataclass(frozen=True)
class DecideOptions:
    team: str = "production"
    runs_dir: str = "runs"
    recipe: str | None = None
    """A vLLM recipe YAML: its environment check becomes evidence (needs an environment snapshot)."""
    write: bool = True
    """Write the decision folder (decision.json, retest.md)."""
    forecast: bool = True
    """Size an expansion by forecast (vLLM's scheduler, oomkit.forecast) instead of ceil(target/capacity)."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    verdict: Verdict
    rule: RuleDoc
    summary: str
    numbers: Numbers
    evidence: tuple[EvidenceDoc, ...]
    recommendations: tuple[str, ...]
    team: TeamDoc
    criteria: tuple[Item, ...]
    checklist: tuple[Item, ...]
    inputs: tuple[InputDoc, ...]
    request_set_id: str | None
    requirements: JsonObject
    untested: tuple[str, ...]
    run_dir: Path | None = None
    capacity: Capacity
    """The measured levels the verdict weighed (`Facts.capacity`)."""
    recipe_check: CheckReport | None = None
    forecast_sizing: ForecastSizing

    def to_dict(self) -> DecisionDoc:
        return {
            "schema": SCHEMA,
            "oomkit_version": __version__,
            "verdict": self.verdict,
            "rule": self.rule,
            "summary": self.summary,
            "numbers": self.numbers,
            "evidence": list(self.evidence),
            "recommendations": list(self.recommendations),
            "team": self.team,
            "criteria": [i.to_dict() for i in self.criteria],
            "checklist": {i.key: i.status for i in self.checklist},
            "checklist_items": [i.to_dict() for i in self.checklist],
            "inputs": list(self.inputs),
            "request_set_id": self.request_set_id,
            "requirements": self.requirements,
            "untested": list(self.untested),
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "capacity": self.capacity.to_dict(),
            "recipe_check": self.recipe_check.to_dict() if self.recipe_check else None,
            "forecast_sizing": self.forecast_sizing.to_dict(),
        }


def _recipe_check(facts: Facts, recipe: str | None) -> CheckReport | None:
    if not recipe:
        return None
    from oomkit.env import check_recipe
    from oomkit.env.model import EnvSnapshot

    snap = facts.env_snapshot()
    if snap is None:
        raise UsageError("--recipe needs an environment snapshot in one of the runs (a launch records one)")
    return check_recipe(recipe, EnvSnapshot.from_dict(snap))


def untested(facts: DecisionFacts) -> list[str]:
    poc = facts.poc()
    out = list(poc.get("untested", [])) if poc else []
    for _, comp in facts.with_compare:
        out += [n for n in comp.get("notes", []) if "skipped" in n]
        out += [
            f"mode {name}: the server did not start ({v.get('phase')})"
            for name, v in comp.get("launch_failures", {}).items()
        ]
    for r, imported in facts.with_import:
        out += [f"{r.path}: {n}" for n in imported.notes]
    cap = facts.capacity()
    need = facts.req.target_with_reserve()
    if cap.max_tested is not None and cap.max_tested < need:
        out.append(f"concurrency above {cap.max_tested:g} (the target with reserve is {need:g})")
    if not facts.ladders:
        out.append("the ladder (short request, tools, history growth, concurrency knee)")
    return list(dict.fromkeys(out))


def _retest(facts: Facts, req: Requirements, team: str) -> tuple[str, bool, str]:
    profile = next((r.manifest.get("profile_file") for r in facts.launches if r.manifest.get("profile_file")), None)
    sets = [Path(r.path) / "request-set.jsonl" for r in facts.runs if (Path(r.path) / "request-set.jsonl").is_file()]
    lines = [
        "# Retest after a vLLM update",
        "",
        "Measure again with the same request set and requirements, then compare the verdicts.",
        "",
    ]
    ok = bool(profile and is_file(profile) and sets)
    if ok:
        cmd = [
            "oomkit",
            "investigate",
            str(profile),
            "--requirements",
            str(req.source),
            "--workload",
            str(sets[0]),
            "--team",
            team,
        ]
        lines += [
            "```bash",
            "oomkit env --json > env-after-update.json   # the new stack, for the record",
            " ".join(shlex.quote(c) for c in cmd),
            "```",
            "",
        ]
        why = f"{profile} with {sets[0]}"
    else:
        why = "the profile file or the request set of these runs is not on disk: the retest cannot be replayed"
        lines += [f"Not replayable: {why}."]
    lines += [
        "Compare: verdict, rule, capacity_concurrency and headroom_pct in decision.json; peak memory, "
        "TTFT p95 and errors per cell. A change of more than the repeat spread is a regression."
    ]
    return "\n".join(lines) + "\n", ok, why


def decide(refs: list[str], requirements: Requirements | str, opts: DecideOptions = DecideOptions()) -> Decision:
    if opts.team not in TEAMS:
        raise UsageError(f"--team {opts.team!r}: one of {', '.join(TEAMS)}")
    req = requirements if isinstance(requirements, Requirements) else load_requirements(requirements)
    with written_by_oomkit(refs):
        runs, set_id = load_all(refs, opts.runs_dir)
        facts = DecisionFacts(runs, req, set_id)
        facts.recipe_check = _recipe_check(facts, opts.recipe)
        team = TEAMS[opts.team]
        crit = criteria(facts, team)
        rule, fired = apply(facts, Ctx(team, crit))
        sizing = _sizing(facts, fired, opts.forecast)
        run = RunDir.create(opts.runs_dir, "decision", kind="decision") if opts.write else None
        text, ok, why = _retest(facts, req, team.name)
        retest_path = run.file("retest.md", "how to measure again after a vLLM update") if run else None
        if retest_path:
            write_text_atomic(retest_path, text)
        items = checklist(facts) + [retest_item(str(retest_path) if retest_path else None, ok and run is not None, why)]
        decision = Decision(
            verdict=fired.verdict,
            rule={"id": rule.id, "text": rule.text, "source": rule.source},
            summary=fired.summary,
            numbers=fired.numbers,
            evidence=fired.evidence,
            recommendations=fired.recommendations + tuple(r for r in (sizing.recommendation(),) if r),
            team={"name": team.name, "asks": team.asks, "source": team.source},
            criteria=tuple(crit),
            checklist=tuple(items),
            inputs=tuple(r.to_dict() for r in _inputs(runs)),
            request_set_id=set_id,
            requirements=req.to_dict(),
            untested=tuple(untested(facts)),
            run_dir=run.path if run else None,
            capacity=facts.capacity(),
            recipe_check=facts.recipe_check,
            forecast_sizing=sizing,
        )
        if run:
            write_json_atomic(
                run.file("decision.json", "the verdict, rule, numbers, evidence, checklist"),
                redact_obj(decision.to_dict()),
            )
            run.finish(
                "complete",
                decision={"verdict": decision.verdict, "rule": rule.id, "team": team.name},
                inputs=[r.path for r in runs],
            )
        return decision


def _sizing(facts: DecisionFacts, fired: Fired, enabled: bool) -> ForecastSizing:
    """How much to expand, by forecast, when the verdict is to add or re-lay GPUs."""
    by_mult = fired.numbers.get("engines_needed")
    if not enabled:
        return ForecastSizing(
            "not_needed", "off", "forecast sizing was turned off (DecideOptions.forecast is False)", by_mult
        )
    if fired.verdict not in ("expand", "change_topology"):
        return ForecastSizing("not_needed", "none", f"the verdict is {fired.verdict}: no expansion to size", by_mult)
    return forecast_sizing(facts)


def _inputs(runs: list[RunEvidence]) -> list[RunEvidence]:
    out: list[RunEvidence] = []
    for r in runs:
        out += [r, *r.servers]
    return out
