"""decision.json and its parts: the verdict vocabulary, the numbers a rule returns, the evidence it
cites, the checklist items, the measured capacity. `decide` writes the document; the report and
`oomkit decide` render it back by these keys."""

from __future__ import annotations

from typing import Final, Literal, TypedDict

from oomkit.decide.documents import SourceEvidence
from oomkit.plan.compare import CompareRow
from oomkit.serial import Json, JsonObject

Verdict = Literal["fix_environment", "tune", "change_topology", "expand", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("fix_environment", "tune", "change_topology", "expand", "inconclusive")
Status = Literal["done", "missing", "failed"]
DONE: Final = "done"
MISSING: Final = "missing"
FAILED: Final = "failed"


class ItemDoc(TypedDict):
    """A checklist item or a team criterion: done (with its evidence), missing or failed."""

    key: str
    title: str
    status: Status
    detail: str
    evidence: list[str]


class EvidenceDoc(SourceEvidence, total=False):
    """What a verdict cites: a quoted line of a run's file (with `run`), a recorded value (`key`,
    `value`), a recipe row, an unmet criterion, or a measured load level (`source`, `ok`, `why`)."""

    run: str
    key: str
    value: Json
    recipe_row: str
    found: str
    why: str
    criterion: ItemDoc
    source: str
    concurrency: float
    ok: bool


class Numbers(TypedDict, total=False):
    """The numbers behind a verdict; each rule sets its own few, in its own order."""

    failed_starts: int
    recipe_rows_failed: int
    step: str
    error_kind: str | None
    phase: str | None
    criteria_done: int
    criterion: str
    check: str
    criteria_open: list[str]
    evidence_kinds: list[str]
    # memory: what vLLM's log and the requirement say
    model_weights_gib: float | None
    estimated_max_model_len: float | None
    longest_request_tokens: int
    context_limit_tokens: float
    kv_cache_tokens: float | None
    # concurrency: what was measured against the target
    target_concurrency: int
    target_with_reserve: float
    reserve_pct: float
    capacity_concurrency: float | None
    first_bad_concurrency: float | None
    max_tested: float | None
    headroom_pct: float | None
    engines_needed: int | None
    gpus_per_engine: int
    # topology or expansion (oomkit.decide.topology)
    planner_error: str
    layout: str
    gpus: int
    add_gpus: int
    planner_row: CompareRow
    gpus_tried: list[int]
    gpus_used: int
    gpus_visible: int
    tensor_parallel_size: int


class PointDoc(TypedDict):
    """One measured concurrency level: did it hold (no errors, no preemptions, SLOs met)?"""

    concurrency: float
    ok: bool
    why: str
    source: str
    figures: JsonObject
    """What the level measured, as its source recorded it (a ladder rung, a cell, an import)."""


class CapacityDoc(TypedDict):
    last_good: float | None
    first_bad: float | None
    max_tested: float | None
    points: list[PointDoc]


class RuleDoc(TypedDict):
    id: str
    text: str
    source: str


class TeamDoc(TypedDict):
    name: str
    asks: str
    source: str


class InputDoc(TypedDict):
    """A run the decision weighed (a compare folder's servers are listed too)."""

    path: str
    kind: str
    request_set_id: str | None
    run_id: str | None
    state: str | None
    servers: list[str]


class DecisionDoc(TypedDict):
    """decision.json (and what `oomkit decide --json` prints)."""

    schema: str
    oomkit_version: str
    verdict: Verdict
    rule: RuleDoc
    summary: str
    numbers: Numbers
    evidence: list[EvidenceDoc]
    recommendations: list[str]
    team: TeamDoc
    criteria: list[ItemDoc]
    checklist: dict[str, Status]
    checklist_items: list[ItemDoc]
    inputs: list[InputDoc]
    request_set_id: str | None
    requirements: JsonObject
    untested: list[str]
    run_dir: str | None
    capacity: CapacityDoc
    recipe_check: JsonObject | None
    forecast_sizing: JsonObject
