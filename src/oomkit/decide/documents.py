"""The files of earlier stages that decide and the report read, by the keys they read: a launch
folder's manifest (oomkit.launch, with the environment snapshot of oomkit.env), ladder.json
(oomkit.ladder) and bench.json (oomkit.bench). Their writers build these documents as plain JSON
objects; these reader-side TypedDicts say what is read. `evidence.read_folder` checks the keys every
reader needs (`evidence.REQUIRED`); a field of another shape (an edited or cut file) fails where it
is read, as one of errors.WRONG_SHAPE, which `evidence.written_by_oomkit` reports in one line.
The small `number` and `whole` helpers narrow a JSON value where a reader needs one."""

from __future__ import annotations

from typing import TypedDict, cast

from oomkit.ladder.poc import Poc
from oomkit.serial import JsonObject


class SourceEvidence(TypedDict, total=False):
    """One piece of evidence a stage recorded: a log line (triage), a failed request (the client),
    a /health check or a metric delta (oomkit.loadrun.failure)."""

    file: str | None
    line: int | None
    text: str | None
    request_id: str | None
    error_kind: str | None
    check: str
    status: int | None
    metric: str
    delta: float | None
    max_kv_usage: float | None


class LaunchVerdict(TypedDict, total=False):
    """The triage verdict on the server's log, as a launch records it."""

    phase: str
    is_oom: bool
    summary: str
    evidence: list[SourceEvidence]


class PhaseMark(TypedDict, total=False):
    phase: str
    line: int | None


class CheckRequest(TypedDict, total=False):
    """`oomkit launch --check`: the short request sent once the server was ready."""

    ok: bool
    latency_ms: float | None
    status: int | None


class LaunchProfile(TypedDict, total=False):
    """The launch profile as the manifest records it (oomkit.launch.Profile, dumped)."""

    model: str
    args: JsonObject


class DriverDoc(TypedDict, total=False):
    driver_version: str | None


class GpuDoc(TypedDict, total=False):
    name: str
    memory_total_bytes: int | None


class SoftwareDoc(TypedDict, total=False):
    vllm_distribution: str | None
    vllm_version: str | None
    torch_version: str | None
    cuda_flavour: str | None


class HostDoc(TypedDict, total=False):
    cpu_model: str | None
    cpu_count: int | None
    ram_total_bytes: int | None


class EnvSnapshotDoc(TypedDict, total=False):
    """`EnvSnapshot.to_dict()` as a launch records it; `error` when the snapshot failed."""

    driver: DriverDoc | None
    gpus: list[GpuDoc]
    gpu_note: str | None
    software: SoftwareDoc | None
    host: HostDoc | None
    visible_gpu_indices: list[int]
    error: str


class Manifest(TypedDict, total=False):
    """A run folder's manifest.json: what every folder has (schema, run_id, kind, state, files) and
    what a launch adds (phases, verdict, figures, the profile, the environment snapshot)."""

    schema: str
    run_id: str
    kind: str
    state: str
    oomkit_version: str
    files: dict[str, str]
    ready: bool
    ready_s: float | None
    phases: list[PhaseMark]
    verdict: LaunchVerdict | None
    figures: JsonObject
    """The figures vLLM printed (triage's table: model_weights_gib, kv_cache_tokens, ...)."""
    profile: LaunchProfile
    profile_file: str | None
    command: list[str]
    check_request: CheckRequest | None
    vllm_version: str | None
    versions: JsonObject
    env_snapshot: EnvSnapshotDoc | None


class StepFailure(TypedDict, total=False):
    """Why a ladder step failed (oomkit.loadrun.failure.Failure)."""

    kind: str
    phase: str
    reason: str
    source: str
    request_id: str | None
    evidence: list[SourceEvidence]


class StepDoc(TypedDict):
    """One ladder step (oomkit.ladder.result.StepResult.to_dict)."""

    name: str
    ok: bool
    phase: str
    peak_memory_bytes: int | None
    max_kv_usage: float | None
    preemptions: float | None
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    latency_ms_p95: float | None
    errors: int
    requests: int
    duration_s: float
    notes: list[str]
    detail: JsonObject
    """Per step: the concurrency step's `rungs` and `knee`, the history step's `context`, ..."""
    failure: StepFailure | None


class LadderTarget(TypedDict, total=False):
    base_url: str
    launched: bool


class LadderDoc(TypedDict, total=False):
    """ladder.json."""

    request_set_id: str
    steps: list[StepDoc]
    knee: JsonObject | None
    poc: Poc
    target: LadderTarget


class BenchDoc(TypedDict, total=False):
    """bench.json: decide reads which request set it sent."""

    request_set_id: str


def as_manifest(data: JsonObject) -> Manifest:
    return cast(Manifest, data)


def as_ladder(data: JsonObject) -> LadderDoc:
    return cast(LadderDoc, data)


def as_bench(data: JsonObject) -> BenchDoc:
    return cast(BenchDoc, data)


def number(value: object) -> float | None:
    """A JSON number as written (an int stays an int), None for null; TypeError for anything else."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise TypeError(f"a number expected, not {type(value).__name__}")


def whole(value: object, default: int) -> int:
    """`int(value or default)`: a vLLM argument written as a number or its digits; TypeError otherwise."""
    v = value or default
    if isinstance(v, (int, float, str)):
        return int(v)
    raise TypeError(f"a whole number expected, not {type(v).__name__}")
