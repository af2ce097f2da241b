"""A log kept as a collector's JSON records (Docker's json-file, journald's export, Fluent Bit, Cloud Logging, a Python
JSON formatter) or in CRI's text format (/var/log/pods) reads as the log it holds: the same verdict, decided the same
way, on the same line numbers, as the plain log."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.logs import iter_records, parse_line, read_text_lines
from oomkit.logs.envelope import Decoder, docker_text, is_enveloped, unwrap
from oomkit.triage import Triage, analyse

SHARED_LOGS = sorted((Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "vllm-logs").glob("*.log"))
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 240, in '
    "determine_available_memory\n"
    "    self.model_runner.profile_run()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
)


def _lines(log: Path) -> list[str]:
    lines = log.read_text(encoding="utf-8", errors="replace").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _docker(lines: list[str]) -> str:
    """As Docker's json-file driver writes: compact, these keys in this order, Go's encoder escaping `<`, `>`, `&`."""
    return "".join(
        json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-12-07T10:00:00.1Z"}, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        + "\n"
        for line in lines
    )


def _fluent_bit(lines: list[str]) -> str:
    """Fluent Bit's or a shipper's records: the same fields with spaces and more of them (read record by record)."""
    return "".join(
        json.dumps({"log": line + "\n", "stream": "stdout", "kubernetes": {"pod_name": "vllm-0"}}) + "\n"
        for line in lines
    )


def _cri(lines: list[str]) -> str:
    return "".join(
        f"2026-12-07T10:00:00.123456789+08:00 {'stderr' if i % 2 else 'stdout'} F {line}\n"
        for i, line in enumerate(lines)
    )


def _journald(lines: list[str]) -> str:
    return "".join(json.dumps({"MESSAGE": line, "_PID": "12", "PRIORITY": "6"}) + "\n" for line in lines)


WRAPPERS = {"docker": _docker, "fluent-bit": _fluent_bit, "cri": _cri, "journald": _journald}


def _verdict(path: Path) -> tuple:
    v = analyse([str(path)]).verdict
    return v.phase, v.is_oom, v.confidence, v.decided_by, v.cause, [e.line for e in v.evidence]


@pytest.mark.skipif(not SHARED_LOGS, reason="../shared/fixtures/vllm-logs is not checked out beside the repository")
@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_a_wrapped_log_reads_as_the_log_it_holds(tmp_path: Path, kind: str) -> None:
    """Each of the shared labelled logs, wrapped: at the starting code 6 Docker, 6 Fluent Bit and 6 journald files (and
    1 CRI file) of the 23 read otherwise (a traceback's frames inside escaped quotes were not read)."""
    differ = []
    for log in SHARED_LOGS:
        wrapped = tmp_path / f"{log.stem}.{kind}.log"
        wrapped.write_text(WRAPPERS[kind](_lines(log)), encoding="utf-8")
        if _verdict(wrapped) != _verdict(log):
            differ.append(log.name)
    assert differ == []


def _vllm_json(lines: list[str]) -> str:
    """The log as vLLM >= 0.32 writes it with `--logging-config.formatter json` (python-json-logger, vLLM's JSON_FORMAT:
    asctime, levelname, name, processName, process, message): one record per logging call, the lines after a header
    (a traceback's) in its message."""
    records: list[dict | str] = []
    for raw in lines:
        rec = parse_line(raw)
        if rec.level and rec.src and rec.time:
            records.append(
                {
                    "asctime": f"2026-{rec.time},000",
                    "levelname": rec.level,
                    "name": "vllm." + rec.src.split(":")[0].removesuffix(".py"),
                    "processName": rec.proc or "MainProcess",
                    "process": rec.pid or 1,
                    "message": rec.msg,
                }
            )
        elif records and isinstance(records[-1], dict):
            records[-1]["message"] += "\n" + raw
        else:
            records.append(raw)  # what a process printed before logging was set up, as it printed it
    return "".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in records)


@pytest.mark.skipif(not SHARED_LOGS, reason="../shared/fixtures/vllm-logs is not checked out beside the repository")
def test_vllms_own_json_format_reads_as_its_text_format(tmp_path: Path) -> None:
    """Level, logger and process come from the record's fields (6 of the 23 read otherwise at the starting code)."""
    differ = []
    for log in SHARED_LOGS:
        wrapped = tmp_path / log.name
        wrapped.write_text(_vllm_json(_lines(log)), encoding="utf-8")
        if _verdict(wrapped)[:4] != _verdict(log)[:4]:  # line numbers differ: a record holds its traceback
            differ.append(log.name)
    assert differ == []


def test_a_json_formatters_record_gives_its_message_and_traceback() -> None:
    record = {"level": "ERROR", "message": "EngineCore failed to start.", "exc_info": TRACEBACK, "stack_info": "None"}
    records = list(read_text_lines(json.dumps(record) + "\n"))
    assert [r.msg for r in records][:2] == ["EngineCore failed to start.", "Traceback (most recent call last):"]
    assert records[-1].msg.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert {r.line for r in records} == {1}
    assert records[0].level is None  # no logger name: logging's text format cannot be rebuilt
    record |= {"name": "vllm.v1.engine.core", "processName": "EngineCore_DP0", "process": 7}
    records = list(read_text_lines(json.dumps(record) + "\n"))
    assert (records[0].level, records[0].src, records[0].msg) == ("ERROR", "vllm.v1.engine.core", record["message"])
    assert {(r.proc, r.pid) for r in records} == {("EngineCore_DP0", 7)}


def test_nested_payloads_are_read() -> None:
    assert unwrap(json.dumps({"jsonPayload": {"message": "a\nb"}, "severity": "ERROR"})).lines == ("a", "b")
    assert unwrap(json.dumps({"_index": "logs", "_source": {"message": "x"}})).lines == ("x",)
    assert unwrap(json.dumps({"labels": {}, "line": "INFO 12-07 10:00:00 [core.py:1] y"})).lines[0].endswith("] y")


def test_a_record_an_excerpt_cut_gives_the_text_it_has() -> None:
    cut = json.dumps({"level": "ERROR", "message": "", "exc_info": TRACEBACK})[:200]
    record = unwrap(cut)
    assert record is not None and record.lines[0] == "Traceback (most recent call last):"
    assert record.lines[1].startswith('  File "/usr/local/lib/python3.12/dist-packages/vllm/')


def test_json_that_is_not_a_log_record_stays_a_line() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert unwrap(body) is None
    assert [r.msg for r in read_text_lines(body + "\n")] == [body]
    plain = "INFO 12-07 10:00:00 [core.py:1] start\n" * 5 + body + "\n"
    assert not is_enveloped(plain.encode())


def test_docker_puts_a_line_it_cut_back_together() -> None:
    """Docker cuts a line longer than 16 KiB into records without a newline; the other stream goes on meanwhile."""
    long_line = "INFO 12-07 10:00:00 [core.py:1] " + "x" * 40000
    parts = [long_line[i : i + 16384] for i in range(0, len(long_line), 16384)]
    records = [{"log": part, "stream": "stdout"} for part in parts[:-1]] + [
        {"log": parts[-1] + "\n", "stream": "stdout"}
    ]
    records.insert(1, {"log": "ERROR 12-07 10:00:01 [core.py:2] other\n", "stream": "stderr"})
    text, where = Decoder().block([json.dumps(r) for r in records], 0)
    assert text.decode().split("\n")[:-1] == ["ERROR 12-07 10:00:01 [core.py:2] other", long_line]
    assert list(where) == [2, 1]


def test_a_line_of_two_objects_keeps_its_line_number() -> None:
    """One decoder call for the block would count the line twice; the line is read on its own, both texts on it."""
    lines = [json.dumps({"log": "a\n", "stream": "stdout"}), '{"log": "b\\n"},{"log": "c\\n"}']
    text, where = Decoder().block(lines, 0)
    assert text.decode().split("\n")[:-1] == ["a", "b", "c"] and list(where) == [1, 2, 2]


def test_a_line_left_open_at_the_end_is_kept() -> None:
    decoder = Decoder()
    text, where = decoder.block([json.dumps({"log": "INFO 12-07 10:00:00 [a.py:1] cut", "stream": "stderr"})], 0)
    assert text == b""
    text, where = decoder.flush()
    assert text == b"INFO 12-07 10:00:00 [a.py:1] cut\n" and list(where) == [1]


@pytest.mark.skipif(not SHARED_LOGS, reason="../shared/fixtures/vllm-logs is not checked out beside the repository")
def test_gzip_stdin_and_reading_every_line_agree(tmp_path: Path) -> None:
    log = next(p for p in SHARED_LOGS if p.stem == "014")  # an OOM in memory profiling, with its traceback
    wrapped = _docker(_lines(log))
    plain_file, gz_file = tmp_path / "x.log", tmp_path / "x.log.gz"
    plain_file.write_text(wrapped, encoding="utf-8")
    gz_file.write_bytes(gzip.compress(wrapped.encode()))
    want = _verdict(log)
    assert _verdict(plain_file) == want and _verdict(gz_file) == want
    every = Triage([str(plain_file)])
    for rec in iter_records([str(plain_file)], stats=every.read):
        every.feed(rec, prefiltered=True)
    assert every.result().to_dict() == analyse([str(plain_file)]).to_dict()
    assert analyse([str(plain_file)]).lines_read == len(_lines(log))
    out = subprocess.run(
        [sys.executable, "-m", "oomkit", "triage", "-", "--json"], input=wrapped, capture_output=True, text=True
    )
    assert json.loads(out.stdout)["verdict"]["phase"] == want[0]


JSONISH = st.text(alphabet='{}[]",:\\ntu0123456789 abclogmessagestream', max_size=80)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(JSONISH, st.builds(lambda t: json.dumps({"log": t, "stream": "stderr"}), st.text())), max_size=6)
)
def test_decoding_never_raises_and_numbers_every_text_line(lines: list[str]) -> None:
    decoder = Decoder()
    text, where = decoder.block(lines, 10)
    rest, rest_where = decoder.flush()
    out = (text + rest).decode().split("\n")[:-1]
    assert len(out) == len(where) + len(rest_where)
    assert all(11 <= line <= 10 + len(lines) for line in [*where, *rest_where])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), min_size=1, max_size=8))
def test_dockers_records_read_in_c_as_record_by_record(texts: list[str]) -> None:
    """The substitution that reads a block of Docker's records gives what decoding each record gives."""
    block = _docker(texts).encode()
    fast = docker_text(block)
    slow, where = Decoder().block(block.decode().split("\n")[:-1], 0)
    if fast is not None:
        assert fast == slow and list(where) == list(range(1, len(texts) + 1))
    else:  # only a text holding a line break leaves the fast path
        assert any("\n" in text for text in texts)
