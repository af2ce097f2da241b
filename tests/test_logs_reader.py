"""Reading sources: files, folders merged in time order, .gz, stdin; bad input is one clear error."""

import gzip
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.errors import InputError
from oomkit.logs import ReadStats, iter_records
from oomkit.triage.prefilter import KEY_BYTES


def write(path, text, mode="w"):
    path.write_text(text) if mode == "w" else path.write_bytes(text)
    return str(path)


def test_file_lines_numbered(tmp_path):
    p = write(tmp_path / "a.log", "one\ntwo\nthree\n")
    assert [(r.line, r.msg) for r in iter_records([p])] == [(1, "one"), (2, "two"), (3, "three")]


def test_folder_merges_ranks_in_time_order(tmp_path):
    (tmp_path / "ranks").mkdir()
    write(
        tmp_path / "ranks" / "rank0.log",
        "INFO 12-02 10:00:01 a.py:1] r0 first\nINFO 12-02 10:00:05 a.py:1] r0 second\n",
    )
    write(
        tmp_path / "ranks" / "rank1.log", "INFO 12-02 10:00:03 a.py:1] r1 middle\nTraceback (most recent call last):\n"
    )
    write(tmp_path / "ranks" / "notes.json", "{}")
    msgs = [r.msg for r in iter_records([str(tmp_path / "ranks")])]
    assert msgs == ["r0 first", "r1 middle", "Traceback (most recent call last):", "r0 second"]


def test_gzip_by_magic_bytes(tmp_path):
    p = tmp_path / "server.log.gz"
    p.write_bytes(gzip.compress(b"hello\nworld\n"))
    assert [r.msg for r in iter_records([str(p)])] == ["hello", "world"]


def test_file_cut_mid_line_keeps_partial_last_line(tmp_path):
    p = write(tmp_path / "cut.log", "complete line\nhalf a li")
    assert [r.msg for r in iter_records([p])] == ["complete line", "half a li"]


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path):
    p = write(tmp_path / "latin.log", b"caf\xe9 ok\nnext\n", mode="b")
    stats = ReadStats()
    recs = list(iter_records([p], stats=stats))
    assert recs[0].msg == "caf\ufffd ok" and stats.decode_errors == 1


def _giant(path, opener=open):
    with opener(path, "wb") as fh:  # 200 MB without a newline (with an error word in it), then a real line
        fh.write(b"RuntimeError: ")
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            fh.write(chunk)
        fh.write(b"\nINFO 12-02 10:00:01 a.py:1] Available KV cache memory: 1.5 GiB\n")
    return str(path)


@pytest.mark.parametrize("kind", ["plain", "gz"])
def test_giant_line_is_cut_without_buffering(tmp_path, kind):
    p = _giant(tmp_path / "giant.log", open) if kind == "plain" else _giant(tmp_path / "giant.log.gz", gzip.open)
    stats = ReadStats()
    recs = list(iter_records([p], key=KEY_BYTES, stats=stats))
    assert stats.truncated_lines == 1 and len(recs[0].raw) <= 65536
    assert recs[-1].msg == "Available KV cache memory: 1.5 GiB" and recs[-1].line == 2


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty"),
        (b"\x00\x01\x02\x03" * 500, "binary"),
        (b"\xff\xfeI\x00N\x00F\x00O\x00", "UTF-16"),
    ],
)
def test_bad_files(tmp_path, content, needle):
    p = write(tmp_path / "bad.log", content, mode="b")
    with pytest.raises(InputError, match=needle):
        list(iter_records([p]))


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list(iter_records([str(tmp_path / "nope.log")]))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.json").write_text("{}")
    with pytest.raises(InputError, match="no log files"):
        list(iter_records([str(tmp_path / "empty")]))


def test_stdin():
    code = "from oomkit.logs import iter_records; print([r.msg for r in iter_records(['-'])])"
    out = subprocess.run([sys.executable, "-c", code], input=b"a\nb\n", capture_output=True, check=True)
    assert out.stdout.decode().strip() == "['a', 'b']"


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_reader_on_any_bytes_only_raises_input_error(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("fz") / "f.log"
    p.write_bytes(data)
    try:
        for rec in iter_records([str(p)]):
            assert rec.line >= 1
    except InputError as err:
        assert err.one_line()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"), max_size=60),
        max_size=40,
    )
)
def test_fast_scan_finds_the_same_lines_as_a_full_read(tmp_path_factory, lines):
    """The block prefilter must agree with reading every line and testing the key on it."""
    p = tmp_path_factory.mktemp("scan") / "f.log"
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    try:
        full = [(r.line, r.raw) for r in iter_records([str(p)]) if KEY_BYTES.search(r.raw.encode())]
        fast = [(r.line, r.raw) for r in iter_records([str(p)], key=KEY_BYTES)]
    except InputError:
        return
    assert fast == full
