"""loadrun.streams: answers whose tokens were read together are bursts, and a quarter of them is a note.
The gap patterns are those of the CPU testbed's requests.jsonl before and after its EngineCore was
pinned (docs/forecast.md, run 4): 2 ms between chunks, or 0 between chunks of one read."""

from __future__ import annotations

from oomkit.client.records import RequestRecord
from oomkit.loadrun.streams import burst_note, is_burst

STREAMED = (2.23, 3.86, 1.76, 2.38, 1.96, 2.15, 2.17, 2.2)
BURST = (13.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # one late read after the first token


def record(itl_ms: tuple[float, ...], ok: bool = True) -> RequestRecord:
    return RequestRecord("r", "concurrency_c2", None, None, 0.0, ok=ok, itl_ms=itl_ms)


def test_an_answer_read_in_one_burst_is_one() -> None:
    assert is_burst(record(BURST)) and not is_burst(record(STREAMED))
    assert not is_burst(record((0.0, 0.0, 0.0)))  # three gaps: too short to tell
    assert not is_burst(record((0.0, 0.0, 2.0, 2.1, 0.0)))  # two reads of two chunks each


def test_a_quarter_of_bursts_is_a_note_with_the_count() -> None:
    note = burst_note([record(BURST)] * 3 + [record(STREAMED)] * 9)
    assert note is not None and note.startswith("3 of 12 streamed answers arrived in one burst")
    assert burst_note([record(BURST)] * 2 + [record(STREAMED)] * 9) is None


def test_failed_and_unstreamed_answers_do_not_count() -> None:
    assert burst_note([record(BURST, ok=False)] * 5 + [record(STREAMED)]) is None
    assert burst_note([record(())] * 5) is None
    assert burst_note([]) is None
