"""A log exported as one JSON document (`gcloud logging read --format=json`, `aws logs filter-log-events`, an
Elasticsearch search response, a pretty-printed array of records) reads as the log it holds, in time order: the same
verdict, decided the same way, from the same lines, as the plain log. At the starting code (02e52c9) such a file was
read as its text lines: a traceback's frames inside `"textPayload": "..."` were not read, and gcloud's newest-first
order put the markers after the error."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.logs import document, iter_records, parallel
from oomkit.logs.document import decode_document, looks_like_document
from oomkit.logs.reader import ReadStats
from oomkit.triage import analyse
from oomkit.triage.fast import scan_key

SHARED_LOGS = sorted((Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "vllm-logs").glob("*.log"))
NEEDS_SHARED = pytest.mark.skipif(not SHARED_LOGS, reason="../shared/fixtures/vllm-logs is not beside the repository")


def _lines(log: Path) -> list[str]:
    lines = log.read_text(encoding="utf-8", errors="replace").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _gcloud(lines: list[str], newest_first: bool = True) -> str:
    """`gcloud logging read --format=json` of a GKE container: one LogEntry a line of output, newest first by default,
    nanosecond times."""
    entries = [
        {
            "insertId": f"x{i:08d}",
            "logName": "projects/p/logs/stderr",
            "receiveTimestamp": "2026-12-07T11:00:00.5Z",
            "resource": {"labels": {"container_name": "vllm", "pod_name": "vllm-0"}, "type": "k8s_container"},
            "severity": "ERROR",
            "textPayload": line,
            "timestamp": f"2026-12-07T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.{i % 10**9:09d}Z",
        }
        for i, line in enumerate(lines)
    ]
    return json.dumps(entries[::-1] if newest_first else entries, indent=2)


def _aws(lines: list[str]) -> str:
    """`aws logs filter-log-events` of an ECS task's stream (awslogs driver): epoch milliseconds, oldest first."""
    events = [
        {"logStreamName": "vllm/vllm/3f2a", "timestamp": 1765100000000 + i, "message": line, "eventId": str(i)}
        for i, line in enumerate(lines)
    ]
    return json.dumps({"events": events, "searchedLogStreams": []}, indent=4)


def _elasticsearch(lines: list[str]) -> str:
    hits = [
        {"_index": "logs", "_id": str(i), "_source": {"@timestamp": f"2026-12-07T10:00:00.{i:06d}Z", "message": line}}
        for i, line in enumerate(lines)
    ]
    return json.dumps({"took": 3, "timed_out": False, "hits": {"total": {"value": len(hits)}, "hits": hits}}, indent=2)


def _docker_array(lines: list[str]) -> str:
    """`jq -s '.'` of Docker's records: a pretty array, each record a line with its newline."""
    return json.dumps([{"log": line + "\n", "stream": "stderr", "time": "2026-12-07T10:00:00Z"} for line in lines])


EXPORTS = {"gcloud": _gcloud, "aws": _aws, "elasticsearch": _elasticsearch, "docker-array": _docker_array}


def _reading(path: Path) -> tuple:
    verdict = analyse([str(path)]).verdict
    return verdict.phase, verdict.is_oom, verdict.confidence, verdict.decided_by, verdict.cause


def _evidence(path: Path) -> list[tuple[int, str]]:
    return [(e.line, e.text) for e in analyse([str(path)]).verdict.evidence]


@NEEDS_SHARED
@pytest.mark.parametrize("kind", sorted(EXPORTS))
def test_an_exported_log_reads_as_the_log_it_holds(tmp_path: Path, kind: str) -> None:
    """The same verdict from the same evidence, on the same line numbers: those of the log the entries hold."""
    differ = []
    for log in SHARED_LOGS:
        exported = tmp_path / f"{log.stem}.{kind}.json"
        exported.write_text(EXPORTS[kind](_lines(log)), encoding="utf-8")
        if _reading(exported) != _reading(log) or _evidence(exported) != _evidence(log):
            differ.append(log.name)
    assert differ == []


def test_corpus_logs_exported_read_as_the_logs_they_hold(tmp_path: Path) -> None:
    """Every 20th case of the corpus's dev part (real logs: excerpts, full start-ups, several formats), exported three
    ways. The whole dev part (3,799 logs, 11,397 exports) read the same when this reader was written."""
    corpus = Path(__file__).resolve().parents[1] / "corpus"
    split = json.loads((corpus / "split.json").read_text())["cases"]
    dev = sorted(case for case, part in split.items() if part == "dev")[::20]
    differ = []
    for case in dev:
        log = corpus / "logs" / f"{case}.log"
        for kind in ("gcloud", "aws", "elasticsearch"):
            exported = tmp_path / f"{case}.{kind}.json"
            exported.write_text(EXPORTS[kind](_lines(log)), encoding="utf-8")
            if _reading(exported) != _reading(log):
                differ.append(f"{case} {kind}")
    assert len(dev) > 150 and differ == []


@NEEDS_SHARED
def test_a_newest_first_export_is_read_oldest_first_and_says_how_it_numbers_lines(tmp_path: Path) -> None:
    log = next(p for p in SHARED_LOGS if p.stem == "009")  # an OOM placed by the markers around it
    exported = tmp_path / "gcloud.json"
    exported.write_text(_gcloud(_lines(log)), encoding="utf-8")
    stats = ReadStats()
    records = list(iter_records([str(exported)], stats=stats))
    assert [rec.raw for rec in records] == _lines(log) and [rec.line for rec in records] == list(range(1, 8))
    assert stats.lines == len(_lines(log)) and any("JSON export of 7 entries" in w for w in stats.warnings)
    wrapped = tmp_path / "wrapped.json"  # a frame wrapped onto the next line is read as one frame
    frame = '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 9, in capture_model'
    wrapped.write_text(
        _aws(["Traceback (most recent call last):", frame[:40], frame[40:], "RuntimeError: CUDA error: out of memory"])
    )
    assert _reading(wrapped)[:2] == ("cudagraph_capture", True)


@NEEDS_SHARED
def test_gzip_stdin_and_several_ranks_read_an_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = next(p for p in SHARED_LOGS if p.stem == "014")  # an OOM in memory profiling, with its traceback
    text = _gcloud(_lines(log))
    gz_file = tmp_path / "export.json.gz"
    gz_file.write_bytes(gzip.compress(text.encode()))
    assert _reading(gz_file) == _reading(log)
    out = subprocess.run(
        [sys.executable, "-m", "oomkit", "triage", "-", "--json"], input=text, capture_output=True, text=True
    )
    assert json.loads(out.stdout)["verdict"]["phase"] == _reading(log)[0]
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank in range(3):
        (ranks / f"rank{rank}.log").write_text(text if rank == 2 else _gcloud(_lines(log)[:3]), encoding="utf-8")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    one, two = (list(iter_records([str(ranks)], key=scan_key(), jobs=jobs)) for jobs in (1, 2))
    assert one == two  # read on worker processes (`parallel.py`) as in this one
    assert analyse([str(ranks)]).verdict.phase == _reading(log)[0]


def test_a_file_that_opens_like_json_but_is_not_an_export_reads_as_text(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    cases = {
        "bracketed.log": '[{"model": "x"}] launch config\n' + oom + "\n",  # a plain log opening with "[{"
        "numbers.json": "[1, 2, 3]\n" + oom + "\n",
        "cut.json": _gcloud([oom, "INFO 12-07 10:00:00 [a.py:1] up"])[:-40],  # an export cut mid-entry
        "config.json": json.dumps([{"name": "vllm", "args": ["--tp", "8"]}] * 3, indent=2),  # entries with no text
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        records = list(iter_records([str(path)]))
        assert len(records) == len(text.splitlines()), name  # every line read as a text line
    assert analyse([str(tmp_path / "bracketed.log")]).verdict.is_oom
    assert analyse([str(tmp_path / "cut.json")]).verdict.is_oom


def test_an_export_over_the_size_limit_is_read_as_text_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("oomkit.logs.reader.DOCUMENT_MAX_BYTES", 200)
    text = _gcloud(["INFO 12-07 10:00:00 [a.py:1] up", "torch.OutOfMemoryError: CUDA out of memory."] * 5)
    path = tmp_path / "big.json"
    path.write_text(text, encoding="utf-8")
    stats = ReadStats()
    records = list(iter_records([str(path)], stats=stats))
    assert len(records) == len(text.splitlines()) and stats.bytes == len(text.encode())
    assert any("jq -c" in warning for warning in stats.warnings)


def test_a_document_nested_past_the_decoders_depth_reads_as_text(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" + '{"a":' * 5000 + "1" + "}" * 5000 + "]\n", encoding="utf-8")
    assert decode_document(deep.read_text()) is None
    assert len(list(iter_records([str(deep)]))) == 1
    records = tmp_path / "deep-records.log"  # one JSON record a line, as a collector writes, nested as deep
    records.write_text(('{"log": "up\\n", "x": ' + '{"a":' * 5000 + "1" + "}" * 5001 + "\n") * 5, encoding="utf-8")
    for path in (deep, records):
        out = subprocess.run([sys.executable, "-m", "oomkit", "triage", str(path)], capture_output=True, text=True)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-300:]


def test_a_few_entries_without_text_are_skipped() -> None:
    entries = [
        {"protoPayload": {"methodName": "io.k8s.core.v1.pods.create"}, "timestamp": "2026-12-07T10:00:00Z"},
        {"textPayload": "INFO 12-07 10:00:01 [a.py:1] one", "timestamp": "2026-12-07T10:00:01Z"},
        {"jsonPayload": {"message": "two"}, "timestamp": "2026-12-07T10:00:02Z"},
    ]
    found = decode_document(json.dumps(entries, indent=1))
    assert found is not None and found.text == b"INFO 12-07 10:00:01 [a.py:1] one\ntwo\n"
    assert decode_document(json.dumps(entries[:1] * 3)) is None  # mostly textless: not a log


def test_times_in_every_scale_sort_the_same() -> None:
    seconds = 1765100000.25
    for stamp in (seconds, seconds * 1e3, seconds * 1e6, seconds * 1e9, "2025-12-07T09:33:20.25Z"):
        assert document._seconds({"timestamp": stamp}) == pytest.approx(seconds, abs=1e-3)
    naive = document._seconds({"@timestamp": "2025-12-07T09:33:20.25"})
    assert naive == pytest.approx(seconds, abs=1e-3)  # a time without zone is read as UTC


def test_the_opening_sniff() -> None:
    assert looks_like_document(b'[\n  {\n    "insertId": "x"')
    assert looks_like_document(b'\xef\xbb\xbf{\n    "events": [')
    assert looks_like_document(b"[]")
    assert not looks_like_document(b"[rank0]: Traceback (most recent call last):")
    assert not looks_like_document(b"INFO 12-07 10:00:00 [a.py:1] up")


ENTRY_VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(min_value=-(10**19), max_value=10**19),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
)
ENTRIES = st.dictionaries(
    st.sampled_from(["textPayload", "message", "log", "timestamp", "@timestamp", "time", "jsonPayload", "severity"]),
    st.one_of(ENTRY_VALUES, st.dictionaries(st.sampled_from(["message", "level"]), ENTRY_VALUES, max_size=2)),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ENTRIES, ENTRY_VALUES), max_size=6), st.integers(min_value=0, max_value=400))
def test_any_json_document_or_its_cut_reads_without_raising(entries: list, cut: int) -> None:
    """Whatever the entries hold (any key, any value, a time of any type or scale) and wherever the file is cut, the
    document gives its text lines oldest first, one number a line, or is left for the text reader."""
    text = json.dumps(entries, indent=1)
    for candidate in (text, text[:cut]):
        found = decode_document(candidate)
        if found is not None:
            lines = found.text.decode().split("\n")[:-1]
            assert list(found.where) == list(range(1, len(lines) + 1)) and found.entries <= len(entries)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(ENTRIES, ENTRY_VALUES), max_size=6), st.integers(min_value=1, max_value=40))
def test_a_document_read_a_few_bytes_at_a_time_reads_as_when_read_whole(entries: list, chunk_bytes: int) -> None:
    """The reader parses a document as its chunks arrive: an entry, a string or a UTF-8 character split between two
    chunks reads the same as the whole file does."""
    raw = json.dumps(entries, indent=1, ensure_ascii=False).replace("a", "é").encode("utf-8")
    pieces = (raw[at : at + chunk_bytes] for at in range(0, len(raw), chunk_bytes))
    whole, chunked = document.read_document(iter((raw,))), document.read_document(pieces)
    assert (whole and (whole.text, list(whole.where), whole.entries)) == (
        chunked and (chunked.text, list(chunked.where), chunked.entries)
    )


def test_one_long_entry_over_many_chunks_is_parsed_a_few_times_not_once_a_chunk() -> None:
    """A 3 MB entry read 64 KiB at a time is parsed again only when what was read has doubled (three or four
    parses), not once a chunk (about 30)."""
    message = "ERROR 12-07 10:00:00 [a.py:1] " + "x" * 3_000_000
    raw = json.dumps([{"textPayload": message, "timestamp": "2026-12-07T10:00:00Z"}]).encode()
    pulled = []

    def pieces():
        for at in range(0, len(raw), 1 << 16):
            pulled.append(at)
            yield raw[at : at + (1 << 16)]

    parses = []
    decoder = json.JSONDecoder()

    class Counting(json.JSONDecoder):
        def raw_decode(self, s: str, idx: int = 0):  # type: ignore[override]
            parses.append(len(s) - idx)
            return decoder.raw_decode(s, idx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(document.json, "JSONDecoder", Counting)
        found = document.read_document(pieces())
    assert found is not None and found.text == (message + "\n").encode()
    assert len(pulled) == len(range(0, len(raw), 1 << 16)) and len(parses) <= 4  # read on by doubling: 1, 2, 4 MiB


def test_a_file_export_past_the_pipe_limit_is_still_read_as_a_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file is rewound when it turns out not to be a document, so it is parsed up to DOCUMENT_MAX_BYTES; only a
    pipe's bytes, which must be kept to be read again, stop at the smaller limit."""
    monkeypatch.setattr("oomkit.logs.reader.UNREWOUND_MAX_BYTES", 200)
    monkeypatch.setattr("oomkit.logs.reader.BLOCK_BYTES", 64)  # many chunks, so the limit is passed mid-document
    lines = ["INFO 12-07 10:00:00 [a.py:1] up", "torch.OutOfMemoryError: CUDA out of memory."] * 5
    path = tmp_path / "export.json"
    path.write_text(_gcloud(lines), encoding="utf-8")
    stats = ReadStats()
    records = list(iter_records([str(path)], stats=stats))
    assert [record.raw for record in records] == lines and not any("jq -c" in warning for warning in stats.warnings)
    cut = tmp_path / "cut.json"  # not a document after all (cut mid-entry): rewound and read as text, every line
    cut.write_text(_gcloud(lines)[:-40], encoding="utf-8")
    stats = ReadStats()
    assert len(list(iter_records([str(cut)], stats=stats))) == len(cut.read_text().splitlines())
    assert stats.bytes == len(cut.read_bytes())


@pytest.mark.parametrize("limit_bytes", [200, 1 << 20])
def test_a_piped_export_is_read_from_the_bytes_kept(tmp_path: Path, limit_bytes: int) -> None:
    """From a pipe (`kubectl logs ... | oomkit triage -`), under the pipe limit the export reads as its entries; over
    it, or when it is not a document, as text lines from the bytes kept, none lost."""
    lines = ["INFO 12-07 10:00:00 [a.py:1] up", "torch.OutOfMemoryError: CUDA out of memory."] * 5
    code = (
        "import sys, json; from oomkit.logs import reader, iter_records; "
        f"reader.UNREWOUND_MAX_BYTES = {limit_bytes}; reader.BLOCK_BYTES = 64; stats = reader.ReadStats(); "
        "records = list(iter_records(['-'], stats=stats)); "
        "print(json.dumps([len(records), stats.bytes, any('jq -c' in w for w in stats.warnings)]))"
    )
    for text, as_document in ((_gcloud(lines), limit_bytes > 200), (_gcloud(lines)[:-40], False)):
        out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True)
        count, read_bytes, warned = json.loads(out.stdout)
        assert count == (len(lines) if as_document else len(text.splitlines())), out.stderr[-300:]
        assert read_bytes == len(text.encode()) or as_document
        assert warned == (limit_bytes == 200)  # both texts are over 200 bytes
