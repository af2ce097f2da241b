"""Follow the server's output live: redact each line, append it to server.log, feed it to the
incremental triage, and report each startup phase the moment it is reached."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from oomkit.redact import redact
from oomkit.serial import JsonObject

if TYPE_CHECKING:
    from oomkit.triage.model import TriageResult


@dataclass(frozen=True)
class PhaseReached:
    """A timeline phase seen in the log, with when (seconds after start) and where."""

    phase: str
    t_s: float
    file: str
    line: int
    time: str | None

    def to_dict(self) -> JsonObject:
        return {"phase": self.phase, "t_s": round(self.t_s, 3), "file": self.file, "line": self.line, "time": self.time}


class LogFollower:
    """Reads the server's merged stdout/stderr pipe in a thread until EOF (the server closed it)."""

    def __init__(
        self, stream: IO[bytes], log_path: Path, started: float, on_phase: Callable[[PhaseReached], None] | None = None
    ):
        from oomkit.logs import parse_line
        from oomkit.triage import Triage

        self._parse_line = parse_line
        self._triage = Triage()
        self._stream = stream
        self._log_path = log_path
        self._started = started
        self._on_phase = on_phase
        self._lock = threading.Lock()
        self.lines = 0
        self.phases: list[PhaseReached] = []
        self._thread = threading.Thread(target=self._run, name="oomkit-follow", daemon=True)

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    @property
    def current_phase(self) -> str | None:
        return self.phases[-1].phase if self.phases else None

    def result(self) -> TriageResult:
        """The triage of everything read so far."""
        with self._lock:
            return self._triage.result()

    def join(self, timeout_s: float) -> bool:
        """Wait for EOF; True when the whole output has been read."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        name = self._log_path.name
        with open(self._log_path, "a", encoding="utf-8") as log:
            for raw in iter(self._stream.readline, b""):
                line = redact(raw.decode("utf-8", errors="replace"))
                log.write(line if line.endswith("\n") else line + "\n")
                log.flush()
                self.lines += 1
                self._feed(line, name)

    def _feed(self, line: str, name: str) -> None:
        record = self._parse_line(line, file=name, line=self.lines)
        with self._lock:
            try:
                entries = self._triage.feed(record)
            except Exception:
                entries = []  # triage must never stop the log from being recorded
        now = time.monotonic() - self._started
        for entry in entries:
            reached = PhaseReached(entry.phase, now, entry.file, entry.line, entry.time)
            self.phases.append(reached)
            if self._on_phase:
                try:
                    self._on_phase(reached)
                except Exception:
                    pass
