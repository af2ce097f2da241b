"""What every load result shares: the header a ladder and a bench both record (run folder, request
set, how it ended, the server it loaded), and the agent-loop tally of a closed-loop load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from oomkit.fsio import from_fields, json_list, json_object
from oomkit.loadrun.engine import SessionOutcome
from oomkit.loadrun.failure import Failure
from oomkit.serial import JsonObject


@dataclass(frozen=True, kw_only=True)
class ResultHeader:
    """The part of ladder.json and bench.json that does not depend on what was measured."""

    run_dir: Path
    request_set_id: str
    failure: Failure | None
    interrupted: bool
    memory_source: str
    target: JsonObject = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    ran: bool = True
    """False when --resume found the load already finished: nothing was sent, this is its record."""

    def header_dict(self) -> JsonObject:
        return {
            "run_dir": str(self.run_dir),
            "request_set_id": self.request_set_id,
            "ran": self.ran,
            "failure": self.failure.to_dict() if self.failure else None,
            "interrupted": self.interrupted,
            "memory_source": self.memory_source,
            "target": self.target,
            "notes": list(self.notes),
        }

    def json_in_order(self, body: JsonObject, keys: tuple[str, ...]) -> JsonObject:
        """The header and `body` as one JSON object, keys in the documented order `keys` (the
        files keep the order they always had: a missing key is a KeyError, not a silent gap)."""
        merged = {**self.header_dict(), **body}
        if set(merged) != set(keys):
            raise KeyError(f"keys {sorted(set(merged) ^ set(keys))} are not in the documented order")
        return {k: merged[k] for k in keys}


class HeaderFields(TypedDict):
    """ResultHeader's fields by keyword: what `header_from` reads back from a result file."""

    run_dir: Path
    request_set_id: str
    failure: Failure | None
    interrupted: bool
    memory_source: str
    target: JsonObject
    notes: tuple[str, ...]
    ran: bool


def header_from(d: JsonObject, notes: tuple[str, ...] = ()) -> HeaderFields:
    """A result file's header as keyword arguments for the result class that wrote it (`ran`
    False: read back, not run); `notes` are appended to the recorded ones."""
    failure = d.get("failure")
    return {
        "run_dir": Path(str(d["run_dir"])),
        "request_set_id": str(d.get("request_set_id", "")),
        "failure": from_fields(Failure, failure) if isinstance(failure, dict) else None,
        "interrupted": bool(d.get("interrupted")),
        "memory_source": str(d.get("memory_source") or ""),
        "target": dict(json_object(d.get("target"))),
        "notes": tuple(str(n) for n in json_list(d.get("notes"))) + notes,
        "ran": False,
    }


@dataclass(frozen=True)
class AgentStats:
    sessions: int
    succeeded: int
    """Finished every step with no error and every tool call valid."""
    failed: int
    cut: int
    """Stopped by the end of the run (duration, a dead server, Ctrl-C): not counted in the share."""
    success_share: float | None

    @classmethod
    def of(cls, outcomes: list[SessionOutcome]) -> AgentStats:
        ok = sum(o.ok for o in outcomes)
        cut = sum(o.cut for o in outcomes)
        failed = len(outcomes) - ok - cut
        judged = ok + failed
        return cls(len(outcomes), ok, failed, cut, ok / judged if judged else None)
