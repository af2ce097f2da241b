"""Why a load stopped: from the server log when oomkit launched the server (oomkit.triage),
otherwise from what the client saw (error classes, /health) and the metrics."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from oomkit.client.probe import health
from oomkit.client.records import RequestRecord
from oomkit.fsio import json_object, json_objects
from oomkit.loadrun.target import Target
from oomkit.metrics.deltas import MetricDeltas
from oomkit.serial import JsonObject

# Client-side error class -> triage phase (the phase vocabulary of oomkit.triage). Without the
# server log these are the best reading; sources: cpu-testbed.md §9 (engine death), §4 (pressure).
PHASE_BY_ERROR = {
    "bad_request": ("not_oom_other", "the server rejected the request (HTTP 4xx)"),
    "not_openai": ("not_oom_other", "the endpoint does not answer as an OpenAI chat server"),
    "malformed_stream": ("not_oom_other", "the response stream is not valid server-sent events"),
    "timeout": ("timeout", "no answer within the per-request timeout"),
    "http_5xx": ("unknown", "the server answered HTTP 5xx"),
    "reset": ("unknown", "the connection was reset mid-response"),
    "refused": ("unknown", "the server stopped accepting connections"),
    "interrupted": ("unknown", "interrupted"),
}

# A request longer than the server's context is refused with HTTP 400 before any work
# (vllm-internals.md §3, E-REQLEN): the request set does not fit max_model_len, which says
# nothing about the server. It is never the failure of a load (ladder and bench fit the set
# first, oomkit.workload.fit); it is counted and noted (length_note).
NOT_FAILURES = ("context_length",)


def length_note(rejected: int) -> str | None:
    """The note for requests the server refused as too long, or None when there were none."""
    if not rejected:
        return None
    return (
        f"{rejected} request{'s' if rejected != 1 else ''} longer than the server's context (HTTP 400 context_length): "
        "the request set does not fit its max_model_len; not a server failure"
    )


# After an engine death vLLM's API server logs the cause and exits within about 0.5 s
# (cpu-testbed.md §9); give the log follower a few seconds to read it.
LOG_CATCH_UP_S = 5.0


@dataclass(frozen=True)
class Failure:
    kind: str
    """The error class of the first failed request (see client.records.ERROR_KINDS)."""
    phase: str
    reason: str
    """One line, for the terminal."""
    source: str
    """"server log" (triage of the launched server's log) or "client" (HTTP errors and metrics)."""
    request_id: str | None = None
    evidence: list[JsonObject] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return asdict(self)


def _engine_phase(rec: RequestRecord) -> str:
    # Tokens had streamed: the engine died while decoding this request; none: in or before prefill.
    return "serving_decode" if rec.chunks else "serving_prefill"


def from_client(first: RequestRecord, base_url: str, deltas: MetricDeltas | None) -> Failure:
    status = health(base_url)
    kind = first.error_kind or "unknown"
    evidence: list[JsonObject] = [{"request_id": first.request_id, "error_kind": kind, "text": first.error}]
    if status is not None:
        evidence.append({"check": "GET /health", "status": status})
    if kind == "engine_dead" or (kind in ("refused", "reset", "http_5xx") and status in (None, 503)):
        phase = _engine_phase(first)
        gone = "and the server is gone" if status is None else f"/health answers {status}"
        reason = f"the engine died while serving ({kind}; {gone})"
        kind = "engine_dead"
    else:
        phase, reason = PHASE_BY_ERROR.get(kind, ("unknown", kind))
    if deltas and deltas.preemptions and deltas.max_kv_usage is not None and deltas.max_kv_usage >= 0.99:
        evidence.append(
            {
                "metric": deltas.names.get("preemptions", "vllm:num_preemptions_total"),
                "delta": deltas.preemptions,
                "max_kv_usage": deltas.max_kv_usage,
            }
        )
        reason += f"; the KV cache was full ({deltas.preemptions:g} preemptions before)"
    return Failure(kind, phase, reason, "client", first.request_id, evidence)


def _settled_verdict(target: Target, wait_s: float) -> JsonObject:
    """The triage verdict (as triage's JSON has it), waiting up to `wait_s` for the log follower
    to read the lines that explain a death (the client sees the HTTP 500 before the log's last
    lines are read)."""
    if target.triage is None:
        raise ValueError("no server log: the server was not launched by oomkit")
    deadline = time.monotonic() + wait_s
    while True:
        verdict = json_object(target.triage().to_dict().get("verdict"))
        if _explains(verdict) or time.monotonic() >= deadline:
            return verdict
        time.sleep(0.25)


def from_log(
    first: RequestRecord, target: Target, deltas: MetricDeltas | None, log_wait_s: float = LOG_CATCH_UP_S
) -> Failure:
    client = from_client(first, target.base_url, deltas)
    try:
        verdict = _settled_verdict(target, log_wait_s if client.kind == "engine_dead" else 0.0)
    except Exception as err:  # the log reader must never hide the failure itself
        return Failure(
            client.kind,
            client.phase,
            client.reason + f" (server log unreadable: {err})",
            client.source,
            client.request_id,
            client.evidence,
        )
    if not _explains(verdict):
        return client  # the log says nothing more than the client saw
    # "unknown" from the log (e.g. a worker killed from outside) still explains more than the
    # client can; the client's prefill/decode reading is then the better phase.
    phase = client.phase if verdict.get("phase") == "unknown" else str(verdict["phase"])
    summary = verdict.get("summary") or client.reason
    evidence = json_objects(verdict.get("evidence")) + client.evidence
    return Failure(client.kind, phase, f"{summary} ({client.kind})", "server log", first.request_id, evidence)


def _explains(verdict: JsonObject) -> bool:
    return verdict.get("phase") not in ("healthy", None) and bool(verdict.get("evidence"))


def classify(
    records: list[RequestRecord] | tuple[RequestRecord, ...],
    target: Target,
    deltas: MetricDeltas | None = None,
    log_wait_s: float = LOG_CATCH_UP_S,
) -> Failure | None:
    """The failure behind the first failed request, or None when every request succeeded or was
    only refused as too long (NOT_FAILURES)."""
    first = next((r for r in records if not r.ok and r.error_kind not in NOT_FAILURES), None)
    if first is None:
        return None
    if target.launched:
        return from_log(first, target, deltas, log_wait_s)
    return from_client(first, target.base_url, deltas)
