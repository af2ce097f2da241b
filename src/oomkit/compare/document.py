"""compare.json, the comparison's document, and its parts: what `compare` writes (cells.jsonl holds
the cells one per line as they finish) and what decide and the report read back by these keys."""

from __future__ import annotations

from typing import Literal, TypedDict, cast

from oomkit.serial import Json, JsonObject

Setting = bool | int | float | str | None
"""A compared setting's value as an experiment file writes it (True, hermes, 2, 0.9)."""
Judgement = Literal["better", "worse", "same", "inconclusive", "unmeasured"]
MetricKey = Literal[
    "peak_memory_bytes",
    "max_kv_usage",
    "prefix_cache_hit_rate",
    "ttft_ms_p95",
    "latency_ms_p95",
    "session_ms_p95",
    "preemptions",
    "errors",
    "agent_success_share",
]
"""The cell figures a comparison judges (oomkit.compare.verdict.METRICS)."""


class ModeDoc(TypedDict):
    """The baseline, or a variant with its one changed factor (compare.json `modes`)."""

    name: str
    factor: str | None
    value: Setting
    side: str | None
    baseline_value: Json
    """The profile's own value of the factor (None: not set there)."""
    notes: list[str]


class CellDoc(TypedDict):
    """One cell (`compare.cells.Cell`, floats rounded): a line of cells.jsonl, a compare.json cell."""

    mode: str
    repeat: int
    label: str
    server_run: str
    concurrency: int
    reset: str
    salt: str | None
    requests: int
    errors: int
    errors_by_kind: dict[str, int]
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    session_ms_p95: float | None
    peak_memory_bytes: int | None
    max_kv_usage: float | None
    preemptions: float | None
    prefix_cache_hit_rate: float | None
    cached_tokens: int | None
    prompt_tokens: int
    agents_total: int
    agents_succeeded: int
    agent_success_share: float | None
    started_unix_s: float
    duration_s: float
    failure: JsonObject | None
    """The server died during the cell: loadrun.failure's record (kind, phase, reason, evidence)."""


class MetricVerdictDoc(TypedDict):
    """One metric's verdict against the baseline (compare.json `comparisons`: mode -> one per metric)."""

    metric: str
    verdict: Judgement
    baseline: list[float]
    variant: list[float]
    delta: float | None
    delta_pct: float | None
    reason: str


class LaunchFailureDoc(TypedDict):
    """A variant's server that did not start: that is the variant's result."""

    run_dir: str
    phase: Json
    summary: Json
    evidence: list[Json]
    """The launch verdict's first lines, as triage recorded them."""


class ServerDeathDoc(TypedDict):
    """A server that died during a cell; kind, phase, reason and evidence copied from its failure."""

    cell: str
    server_run: str
    kind: Json
    phase: Json
    reason: Json
    evidence: list[Json]


class Totals(TypedDict):
    """Server starts and restarts over every attempt at one comparison (resumes included)."""

    server_starts: int
    restarts: int


class BaselineDoc(TypedDict):
    profile: str
    concurrency: int
    sessions: int | None
    steps: int | None


class CompareDoc(TypedDict):
    """compare.json."""

    schema: str
    experiment: str
    experiment_file: str | None
    request_set_id: str | None
    repeats: int
    baseline: BaselineDoc
    modes: list[ModeDoc]
    cells: list[CellDoc]
    comparisons: dict[str, list[MetricVerdictDoc]]
    launch_failures: dict[str, LaunchFailureDoc]
    server_deaths: dict[str, ServerDeathDoc]
    failed_cells: list[CellDoc]
    server_runs: dict[str, str | None]
    server_starts: int
    restarts: int
    reset_methods: list[str]
    notes: list[str]
    duration_s: float


class CompareJson(CompareDoc):
    """What `oomkit compare --json` prints: the folder, then compare.json."""

    run_dir: str


class CompareRecord(TypedDict, total=False):
    """What a compare folder's manifest records (`RunDir.update`), read back to resume."""

    kind: str
    experiment: JsonObject
    """The experiment file as read (`ExperimentSpec.model_dump`)."""
    request_set_id: str
    server_runs: dict[str, str | None]
    launch_failures: dict[str, LaunchFailureDoc]
    server_deaths: dict[str, ServerDeathDoc]
    compare: Totals
    """Set when an attempt ended (complete, failed or interrupted)."""


def as_compare(data: JsonObject) -> CompareDoc:
    """compare.json read back (decide checks its schema and the keys it reads first)."""
    return cast(CompareDoc, data)


def as_record(manifest: JsonObject) -> CompareRecord:
    """A compare folder's manifest by the keys this package wrote into it. A field of another shape
    (an edited file) fails where it is used, as a TypeError or KeyError (errors.WRONG_SHAPE)."""
    return cast(CompareRecord, manifest)


def as_cells(lines: list[JsonObject]) -> list[CellDoc]:
    """cells.jsonl read back: each line is a `Cell.to_dict()` this package wrote."""
    return cast(list[CellDoc], lines)
