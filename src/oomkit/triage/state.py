"""What the triage state machine keeps while it reads a log: failure hits and the log's state so far."""

from __future__ import annotations

from dataclasses import dataclass, field

from oomkit.logs import Record
from oomkit.triage.model import Evidence, TimelineEntry
from oomkit.triage.rules import Failure


@dataclass
class Hit:
    """One failure line, with the phase the log was in when it was printed."""

    rule: Failure
    evidence: Evidence
    context_phase: str | None  # from traceback frames or the last marker
    context_source: str  # "frames", "markers", "nearby" (the first marker after it), "message" or "none"
    after_ready: bool
    prefill_hint: str | None
    pid: int | None = None
    count: int = 1
    from_raise: bool = False  # read from the raising source line of a traceback cut before its exception line


@dataclass
class State:
    timeline: list[TimelineEntry] = field(default_factory=list)
    stage: int = -1
    after: str | None = None
    ready: bool = False
    shutdown: Evidence | None = None
    hits: dict[str, Hit] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    frames: dict[int | None, list[str]] = field(default_factory=dict)
    frames_from: dict[int | None, tuple[str, int]] = field(default_factory=dict)  # pid: file, line of its last header
    slow: Evidence | None = None
    last_exception: Evidence | None = None
    open_traceback: tuple[Evidence, int | None] | None = None  # a header with no exception line yet
    serving_message: bool = False  # a line only the model-execution path prints was seen
    frames_only: tuple[Evidence, int | None] | None = None  # the first frame of a log cut before its header
    methods: dict[int | None, str] = field(default_factory=dict)  # the worker method a wrapper names
    engine_warm: Evidence | None = None  # graph capture finished / engine initialised: start-up's memory steps done
    wrapped_frame: tuple[str, int, int | None, str] | None = None  # file, line, pid, path: a frame cut by a line wrap
    batch: str | None = None  # "prefill"/"decode": the last failed step's batch, from V1's SchedulerOutput dump
    raised: dict[int | None, Record] = field(default_factory=dict)  # pid: its innermost frame's raise, as the exception
    raise_read: bool = False
    request_error: Evidence | None = None  # the API server failing one request (HTTP 500), the engine serving on

    def drop_hits(self, rule_ids: list[str]) -> None:
        """Forget failures the log got past (a wait that ended)."""
        for rule_id in rule_ids:
            if rule_id in self.hits:
                del self.hits[rule_id]
                self.order.remove(rule_id)
