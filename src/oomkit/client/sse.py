"""Server-sent events, incrementally: bytes in, `data` payloads (str) out, by the SSE spec's field
rules. The common case (one `data:` line per event, "\\n" line ends, as vLLM, SGLang and TGI send)
takes a fast path: the client pays for this parser on every streamed token."""

from __future__ import annotations

import codecs


class MalformedStream(ValueError):
    """The body is not a text/event-stream (a line that is no SSE field)."""


_FIELDS = ("data", "event", "id", "retry")
# One event larger than this is no chat chunk (vLLM's are under a few KiB, tool calls and logprobs
# included): a body that never ends an event must fail, not grow the buffer until the timeout.
MAX_EVENT_CHARS = 8 * 2**20


class SseDecoder:
    """Feed raw body pieces; get the `data` of every complete event. Events end at a blank line;
    several `data:` lines in one event are joined with a newline; comments (`:`) are skipped."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._buf = ""

    def feed(self, piece: bytes) -> list[str]:
        text = self._text.decode(piece)
        if "\r" in text or self._buf.endswith("\r"):
            text = (self._buf + text).replace("\r\n", "\n").replace("\r", "\n")
            self._buf = ""
        buf = self._buf + text if self._buf else text
        events = buf.split("\n\n")
        self._buf = events.pop()  # the unfinished rest ("" when the piece ended an event)
        if len(self._buf) > MAX_EVENT_CHARS:
            raise MalformedStream(f"no end of event after {MAX_EVENT_CHARS:,} characters: {self._buf[:80]!r}")
        out = []
        for ev in events:
            if ev.startswith("data: ") and "\n" not in ev:
                out.append(ev[6:])  # the fast path
            elif ev:
                data = self._event(ev)
                if data is not None:
                    out.append(data)
        return out

    def _event(self, ev: str) -> str | None:
        data: list[str] = []
        for line in ev.split("\n"):
            if line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
            elif line and not line.startswith(":") and line.split(":", 1)[0] not in _FIELDS:
                raise MalformedStream(f"not a server-sent event line: {line[:80]!r}")
        return "\n".join(data) if data else None

    def close(self) -> list[str]:
        """End of body: an event not terminated by a blank line is still delivered."""
        rest, self._buf = self._buf + self._text.decode(b"", final=True), ""
        data = self._event(rest.strip("\n")) if rest.strip("\n") else None
        return [data] if data is not None else []
