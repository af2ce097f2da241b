"""How long steps report progress; the command layer renders it, the library only calls it."""

from __future__ import annotations

from typing import Protocol, TextIO


class Progress(Protocol):
    def start(self, label: str, total: int | None) -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass


class LineProgress:
    """Progress on a terminal stream: a counter redrawn in place on a TTY, one line per step
    otherwise (so logs and CI output stay readable)."""

    def __init__(self, stream: TextIO, enabled: bool = True):
        self.stream = stream
        self.enabled = enabled
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.label = ""
        self.total: int | None = None
        self.done = 0

    def start(self, label: str, total: int | None) -> None:
        self.label, self.total, self.done = label, total, 0
        if self.enabled and not self.tty:
            what = f"{total} requests" if total is not None else "requests until the deadline"
            self.stream.write(f"{label}: {what}\n")
            self.stream.flush()
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self) -> None:
        if not (self.enabled and self.tty):
            return
        of = f"/{self.total}" if self.total is not None else ""
        width = 24
        bar = ""
        if self.total:
            filled = min(width, int(width * self.done / self.total))
            bar = "[" + "#" * filled + "." * (width - filled) + "] "
        self.stream.write(f"\r{self.label:<20} {bar}{self.done}{of}\x1b[K")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
