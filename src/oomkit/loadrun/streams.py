"""Whether the answers really streamed: a server whose front-end falls behind its engine sends each
answer's tokens together at its end, and then TTFT and ITL measure that backlog, not the engine.

Seen on the CPU testbed before its EngineCore was pinned (docs/forecast.md, run 4): 21 to 40 of 46
streamed answers came in one read. vLLM's API server is one Python process that detokenizes and
writes every running answer at every step; short of CPU (a busy host, a small model's fast steps,
many streams) it falls behind the same way on a GPU host."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oomkit.client.records import RequestRecord

MIN_GAPS = 4  # an answer of a few tokens can arrive in one read without any backlog
TOGETHER_MS = 0.05  # chunks decoded from one socket read have a gap of 0 (client.records)
BURST_SHARE = 0.8  # of an answer's gaps: it came in one burst
NOTE_SHARE = 0.25  # of the streamed answers: worth a note


def is_burst(record: RequestRecord) -> bool:
    """Most of the answer's token chunks were read together, after its first."""
    return burst_gaps(record.itl_ms)


def burst_gaps(itl_ms: Sequence[float]) -> bool:
    """The gaps between an answer's token chunks (requests.jsonl `itl_ms`) say it came in one burst."""
    return len(itl_ms) >= MIN_GAPS and sum(g < TOGETHER_MS for g in itl_ms) >= BURST_SHARE * len(itl_ms)


def noted_bursts(answers: Iterable[Sequence[float]]) -> tuple[int, int] | None:
    """(bursts, streamed) over answered requests' chunk gaps when a quarter or more of the streamed
    ones came in one burst; None when that is not worth a note."""
    streamed = [gaps for gaps in answers if len(gaps) >= MIN_GAPS]
    bursts = sum(burst_gaps(gaps) for gaps in streamed)
    if not streamed or bursts < NOTE_SHARE * len(streamed):
        return None
    return bursts, len(streamed)


def burst_note(records: Iterable[RequestRecord]) -> str | None:
    """A note when at least a quarter of the streamed answers came in one burst, else None."""
    found = noted_bursts(r.itl_ms for r in records if r.ok)
    if found is None:
        return None
    return (
        f"{found[0]} of {found[1]} streamed answers arrived in one burst (their tokens read together): "
        "TTFT and ITL here measure the server front-end's backlog, not the engine; give vLLM's API server "
        "more CPU (fewer other processes on its cores, --api-server-count)"
    )
