"""A log whose newlines a web page collapsed (a Hugging Face Space's "Runtime error" panel, some forums) is read as the
records it holds: each vLLM header, traceback start, frame and exception line a record of its own, on the line's
number. Other lines stay one record each."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.logs import iter_records, read_text_lines
from oomkit.logs.flat import FLAT_MIN_CHARS, pieces
from oomkit.triage import analyse

SPACE_PANEL = (
    'Exit code: 1. Reason: ckages/vllm/engine/arg_utils.py", line 958, in create_engine_config '
    'Traceback (most recent call last): File "/usr/local/lib/python3.11/site-packages/vllm/entrypoints/llm.py", '
    "line 242, in __init__ self.llm_engine = self.engine_class.from_engine_args( "
    'File "/usr/local/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1002, in create_model_config '
    "model_config = ModelConfig( "
    'File "/usr/local/lib/python3.11/site-packages/vllm/transformers_utils/config.py", line 201, in get_config '
    'raise ValueError(f"No supported config format found in {model}") '
    "ValueError: No supported config format found in acme/proxy-3b"
)
V0_FRAMES = "".join(
    f"ERROR 08-04 09:24:47 engine.py:389] {text} "
    for text in (
        "Traceback (most recent call last):",
        'File "/usr/local/lib/python3.11/site-packages/vllm/engine/multiprocessing/engine.py", line 380, in run_mp_engine',
        "engine = MQLLMEngine.from_engine_args(engine_args=engine_args,",
        "ValueError: No supported config format found in acme/proxy-3b",
    )
)
STATS = (
    "(APIServer pid=7) INFO 07-28 06:41:09 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
    "generation throughput: 239.2 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 91.6%, Prefix cache "
    "hit rate: 0.0%"
)


def test_a_collapsed_traceback_is_its_frames_and_its_exception() -> None:
    records = list(read_text_lines(SPACE_PANEL + "\n"))
    msgs = [r.msg for r in records]
    assert msgs[1] == "Traceback (most recent call last):"
    assert sum(m.startswith('File "') for m in msgs) == 3
    assert msgs[-1] == "ValueError: No supported config format found in acme/proxy-3b"
    assert msgs[-2].endswith('raise ValueError(f"No supported config format found in {model}")')
    assert {r.line for r in records} == {1}


def test_a_frame_under_its_own_header_stays_with_it() -> None:
    records = list(read_text_lines(V0_FRAMES + "\n"))
    assert len(records) == 4
    assert all(r.level == "ERROR" and r.src == "engine.py:389" for r in records)
    assert records[1].msg.startswith('File "/usr/local/lib/python3.11/site-packages/vllm/engine/multiprocessing/')


def test_stats_lines_run_together_are_each_read() -> None:
    records = list(read_text_lines(STATS + STATS.replace("91.6%", "97.0%") + "\n"))
    assert [r.pid for r in records] == [7, 7]
    assert records[1].msg.endswith("GPU KV cache usage: 97.0%, Prefix cache hit rate: 0.0%")


def test_a_long_line_with_one_record_is_one_record() -> None:
    args = "(APIServer pid=1) INFO 09-14 02:34:08 [utils.py:233] non-default args: {" + "'model': 'x', " * 30 + "}"
    assert len(args) >= FLAT_MIN_CHARS
    assert pieces(args) == [args]
    one_frame = '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 75, in __init__ ' + "x" * 300
    assert pieces(one_frame) == [one_frame]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=FLAT_MIN_CHARS, max_size=2000))
def test_pieces_keep_the_lines_text_in_order(text: str) -> None:
    """Cutting never invents, drops or reorders text: the pieces are the line's own characters, in order, with only
    the blanks between records gone."""
    joined = "".join(pieces(text))
    assert "".join(text.split()) == "".join(joined.split())


def test_triage_reads_a_collapsed_space_log(tmp_path: Path) -> None:
    log = tmp_path / "space.log"
    log.write_text(SPACE_PANEL + "\n")
    verdict = analyse([str(log)]).verdict
    assert (verdict.phase, verdict.decided_by) == ("environment", "frames")
    assert len(list(iter_records([str(log)]))) == 6
