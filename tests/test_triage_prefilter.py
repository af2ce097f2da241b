"""The prefilter reads only the lines a rule can use, yet never changes a result: the fast path
(derived key, periodic lines counted in bulk, ranks on worker processes, RE2 or re) must give the
same triage as feeding the engine every line of the log."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.logs import iter_records, parse_line
from oomkit.logs import parallel as parallel_scan
from oomkit.triage import Triage, analyse
from oomkit.triage.fast import literal_key
from oomkit.triage.literals import Literal, required_literals
from oomkit.triage.prefilter import KEY_BYTES, KEY_ERE, PRESSURE, rule_patterns
from oomkit.triage.stats import FULL_KV_PCT

REPO = Path(__file__).resolve().parents[1]
LOGS = sorted((REPO / "corpus" / "logs").glob("*.log")) + sorted((REPO / "tests" / "fixtures").rglob("*.log"))
STATS = (
    "(APIServer pid=1) INFO 12-02 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {pt:.1f} tokens/s, "
    "Avg generation throughput: 9.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {kv:.1f}%, "
    "Prefix cache hit rate: 0.0%\n"
)
REQUEST = '(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK\n'
CHATTER = "(EngineCore_DP0 pid=2) DEBUG 12-02 10:00:00 [core.py:1] scheduled {n} new tokens\n"


def full_read(path: str) -> dict:
    """The reference: every line of the log fed to the engine, no key, no bulk counting."""
    triage = Triage([path])
    for rec in iter_records([path], stats=triage.read):
        triage.feed(rec, prefiltered=True)
    return triage.result().to_dict()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_fast_path_equals_reading_every_line(path):
    assert analyse([str(path)]).to_dict() == full_read(str(path))


def test_every_rule_has_literals_and_the_key_keeps_every_line_a_rule_matches():
    """Over every line of the corpus: a line any rule matches is a line the key lets through."""
    patterns = [pattern for _name, pattern in rule_patterns()]
    assert all(required_literals(pattern) for pattern in patterns)
    checked = 0
    for path in LOGS:
        for number, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            rec = parse_line(raw, str(path), number)
            if any(pattern.search(rec.msg) for pattern in patterns):
                checked += 1
                assert KEY_BYTES.search(raw.encode()), f"{path.name}:{number} matched by a rule, dropped by the key"
    assert checked > 1000


@pytest.mark.parametrize(
    "pattern,expected",
    [
        (r"(?:takes|took) (?P<s>[\d.]+) s", {"takes ", "took "}),
        (r"^Available KV cache memory: (?P<kv>-?[\d.]+) GiB", {"Available KV cache memory: "}),
        (r"(?i)cuda out of memory", {"cuda out of memory"}),
        (r"Engine (?:\d+)|Added request", {"Engine ", "Added request"}),
        (r"x+abcd(?:ef)?", {"abcd"}),
        (r"\d+ MiB", {" MiB"}),
        # a class of a few characters forks the run like an alternation of one-character words
        (r' HTTP/1\.1" [45]\d\d', {' HTTP/1.1" 4', ' HTTP/1.1" 5'}),
    ],
)
def test_required_literals(pattern, expected):
    need = required_literals(re.compile(pattern))
    assert need is not None and {lit.text for lit in need} == expected


@pytest.mark.parametrize("pattern", [r"a|bcdef", r"\d+", r"(?:abc)?def?", r"[A-Z]+Error"])
def test_no_literal_is_none_not_a_guess(pattern):
    """An optional part, a short branch or a class gives no literal every match must hold."""
    need = required_literals(re.compile(pattern))
    assert need is None or all(len(lit.text) >= 3 for lit in need)
    if pattern == r"a|bcdef":
        assert need is None


def test_case_folded_literal_is_marked():
    need = required_literals(re.compile(r"(?i:out of memory)"))
    assert need == frozenset({Literal("out of memory", ignore_case=True)})


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab(|)?*+cd[]^", min_size=1, max_size=12))
def test_literals_are_in_every_match(pattern):
    """Soundness on random patterns: every string the pattern matches holds one of its literals."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return
    need = required_literals(compiled)
    if need is None:
        return
    for text in ("abcd", "cdab", "aabbccdd", "abab", "cdcd", "acbd", "dcba", "abcdabcd", "bbbbcccc"):
        if compiled.search(text):
            assert any(lit.text in text for lit in need), (pattern, text, need)


@pytest.mark.parametrize("waiting", [0, 1, 12])
def test_pressure_key_is_the_full_kv_threshold(waiting):
    """A stats line the engine counts as full (KV >= FULL_KV_PCT with requests waiting) is a key line;
    others are periodic lines, counted in bulk."""
    key = re.compile(PRESSURE)
    for tenth in range(0, 1001, 7):
        kv = tenth / 10
        line = STATS.format(m=0, s=0, pt=1.0, r=3, w=waiting, kv=kv)
        full = kv >= FULL_KV_PCT and waiting > 0
        assert bool(key.search(line)) == full, line


def write_serving_log(path: Path, lines: int, pressure_at: int | None, oom: bool) -> None:
    out = ["(APIServer pid=1) INFO 12-02 09:59:00 [launcher.py:1] Starting vLLM server on http://0.0.0.0:8000\n"]
    for i in range(lines):
        minute, second = divmod(i // 10, 60)
        kv = 99.5 if pressure_at is not None and pressure_at <= i < pressure_at + 3 else 20 + i % 60
        waiting = 4 if pressure_at is not None and pressure_at <= i < pressure_at + 3 else 0
        if i % 3 == 0:
            out.append(STATS.format(m=minute % 60, s=second, pt=float(i % 2), r=1 + i % 9, w=waiting, kv=kv))
        else:
            out.append(REQUEST if i % 3 == 1 else CHATTER.format(n=i))
    if oom:
        out.append(
            "(EngineCore_DP0 pid=2) ERROR 12-02 11:00:00 [core.py:9] torch.OutOfMemoryError: CUDA out of memory.\n"
        )
    path.write_text("".join(out))


@pytest.mark.parametrize("pressure_at,oom", [(None, True), (3000, False), (None, False)])
def test_stats_heavy_log_equals_full_read(tmp_path, pressure_at, oom):
    log = tmp_path / "server.log"
    write_serving_log(log, 20000, pressure_at, oom)
    fast = analyse([str(log)]).to_dict()
    assert fast == full_read(str(log))
    assert fast["facts"]["stats"]["samples"] == 6667


def test_ranks_on_workers_equal_one_process(tmp_path, monkeypatch):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(3):
        write_serving_log(folder / f"rank{rank}.log", 6000, 900 if rank == 1 else None, rank == 2)
    serial = analyse([str(folder)]).to_dict()
    monkeypatch.setattr(parallel_scan, "PARALLEL_MIN_BYTES", 0)
    assert parallel_scan.worth_parallel([str(p) for p in folder.glob("*.log")], jobs=2)
    assert analyse([str(folder)]).to_dict() == serial
    assert serial["verdict"]["phase"] == "serving_prefill"


def _as_docker_records(text: str) -> str:
    return "".join(
        json.dumps({"log": line, "stream": "stderr", "time": "2026-12-02T10:00:00Z"}) + "\n"
        for line in text.splitlines(keepends=True)
    )


@pytest.mark.parametrize("max_records", [200_000, 3])
def test_decoded_ranks_on_workers_equal_one_process(tmp_path, monkeypatch, max_records):
    """Rank files the key cannot scan in place (Docker's JSON records, a .gz, a plain file beside them) are decoded on
    workers, each returning its candidate records (or, past a bound, leaving the file to the parent); the verdict,
    facts and counts equal one process's reading."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(3):
        write_serving_log(folder / f"rank{rank}.log", 6000, 900 if rank == 1 else None, rank == 2)
    docker = (folder / "rank0.log").read_text()
    (folder / "rank0.log").write_text(_as_docker_records(docker))
    packed = (folder / "rank1.log").read_bytes()
    (folder / "rank1.log").unlink()
    (folder / "rank1.log.gz").write_bytes(gzip.compress(packed))
    serial = analyse([str(folder)]).to_dict()
    monkeypatch.setattr(parallel_scan, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_scan, "DECODED_MAX_RECORDS", max_records)  # 3: the workers give up, the parent reads
    decoded: list[str] = []
    real = parallel_scan.scan_all

    def scan_all(plain, to_decode, *rest):
        decoded.extend(Path(name).name for name in to_decode)
        return real(plain, to_decode, *rest)

    monkeypatch.setattr(parallel_scan, "scan_all", scan_all)
    assert analyse([str(folder)]).to_dict() == serial
    assert sorted(decoded) == ["rank0.log", "rank1.log.gz"]
    assert serial["verdict"]["phase"] == "serving_prefill" and serial["facts"]["stats"]["samples"] == 6000


def test_python_re_fallback_equals_re2(tmp_path, monkeypatch):
    """OOMKIT_PREFILTER=re (what a machine without google-re2 gets) reads the same lines."""
    from oomkit.triage import fast

    log = tmp_path / "server.log"
    write_serving_log(log, 3000, 600, True)
    paths = [str(log), *(str(p) for p in LOGS[:40])]
    with_re2 = [analyse([p]).to_dict() for p in paths]
    fast.scan_key.cache_clear()
    monkeypatch.setenv("OOMKIT_PREFILTER", "re")
    try:
        assert fast.engine_name() == "re"
        assert [analyse([p]).to_dict() for p in paths] == with_re2
    finally:
        monkeypatch.delenv("OOMKIT_PREFILTER")
        fast.scan_key.cache_clear()


def _lines_read(data: bytes, key) -> list[int]:
    from oomkit.logs.reader import _spans

    return [start for start, _ in _spans(data, key, None, release=False)]


@pytest.mark.parametrize("horizon", [64, 4096, 4 << 20])
def test_the_literal_fallback_reads_the_lines_the_key_matches(monkeypatch, horizon):
    """The fallback's key (literals found with bytes.find, its two patterns with re) reads exactly the lines the key's
    one alternation matches, however its horizon and the reader's windows cut the text, and with another buffer's
    cursor in between (rank files read in turn)."""
    from oomkit.logs import reader
    from oomkit.triage import fast

    monkeypatch.setattr(fast, "HORIZON_BYTES", horizon)
    monkeypatch.setattr(reader, "SCAN_WINDOW", 1000)
    data = b"".join(path.read_bytes() for path in LOGS[:: max(1, len(LOGS) // 60)][:60])
    pressure = STATS.format(m=0, s=0, pt=1.0, r=3, w=2, kv=99.0).encode()
    data += b"noise\n" * 50 + pressure + b'{"log":"x","stream":"stderr"}\n'
    expected, offset = [], 0
    for line in data.split(b"\n"):
        if KEY_BYTES.search(line):
            expected.append(offset)
        offset += len(line) + 1
    key = fast.literal_key()
    assert _lines_read(data, key) == expected
    other = data[len(data) // 2 :]
    first, second = key.cursor(data), key.cursor(other)
    hits = [first.search(0, len(data)), second.search(0, len(other)), first.search(1, len(data))]
    assert [hit.start() for hit in hits if hit] == [
        m.start() for m in (KEY_BYTES.search(data), KEY_BYTES.search(other), KEY_BYTES.search(data, 1)) if m
    ]


@pytest.mark.skipif(shutil.which("grep") is None, reason="no grep on this machine")
def test_grep_reference_reads_the_same_lines():
    """The benchmark times grep -E with KEY_ERE: it must select the lines the key selects."""
    sample = [p for p in LOGS if p.stat().st_size < 200_000][:60]
    for path in sample:
        data = path.read_bytes()
        want = [i for i, line in enumerate(data.split(b"\n"), 1) if KEY_BYTES.search(line)]
        out = subprocess.run(["grep", "-a", "-n", "-E", KEY_ERE, str(path)], capture_output=True, check=False)
        got = [int(line.split(b":", 1)[0]) for line in out.stdout.splitlines()]
        assert got == want, path.name


def test_a_request_line_whose_prefix_did_not_parse_is_skipped_for_the_next(tmp_path):
    """An excerpt's first request line cut mid-word ("NFO ...") carries the literal but places no serving marker: the
    gap scan takes the next request line, as reading every line does."""
    log = tmp_path / "cut.log"
    log.write_text(
        "NFO 11-20 19:56:18 engine.py:267] Added request embd-0.\n"
        "INFO 11-20 19:56:18 engine.py:267] Added request embd-1.\n"
        "INFO 11-20 19:56:18 engine.py:267] Added request embd-2.\n"
        "ERROR 11-20 19:56:18 engine.py:135] RuntimeError('stack expects each tensor to be equal size')\n"
    )
    fast = analyse([str(log)]).to_dict()
    assert fast == full_read(str(log))
    assert [entry["line"] for entry in fast["timeline"]] == [2]


def test_a_stats_line_run_on_after_a_progress_bar_is_read_as_it_is(tmp_path):
    # A progress bar without its newline runs the next stats line on after it: the line holds the stats tag
    # mid-way and is no stats line, so the first stats line (the serving marker) is the next one, on both paths
    v0 = (
        "INFO 08-09 03:02:{s:02d} metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache "
        "usage: 0.0%.\n"
    )
    bar = "Compiling FSM index for all state transitions: 100%|██████████| 15831/15831 [15:10<00:00, 17.39it/s]"
    path = tmp_path / "bar.log"
    stats = "".join(v0.format(s=s, kv=kv) for s, kv in ((36, 1.0), (46, 2.0), (50, 3.0), (56, 1.0)))
    path.write_text("....\n" + bar + v0.format(s=26, kv=97.0) + stats)  # the run-on line's figures are no sample
    fast = analyse([str(path)]).to_dict()
    assert fast == full_read(str(path))
    assert fast["timeline"][0]["phase"] == "serving" and fast["timeline"][0]["line"] == 3


def test_a_stats_line_short_of_pressure_is_not_a_key_line():
    """Stats lines are periodic lines, counted in bulk; a rule whose literal every stats line holds sends them all to
    Python (the first form of session 31's argparse-usage rule had the literal "usage: ", which "GPU KV cache usage:
    35.2%" holds: the fallback's small stats case took 17.8 s instead of 3.1 s)."""
    v0 = (
        "INFO 12-02 10:00:00 metrics.py:341] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.0 "
        "tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache "
        "usage: 0.0%.\n"
    )
    for kv in (0.0, 35.2, 94.9, 100.0):
        for line in (STATS.format(m=0, s=0, pt=1.0, r=3, w=0, kv=kv), v0.format(kv=kv)):
            assert not KEY_BYTES.search(line.encode()), line
            assert literal_key().search(line.encode()) is None, line


def test_the_access_log_lines_of_a_busy_server_are_not_key_lines():
    """uvicorn logs every request; only an error status can change the verdict (E-HTTPERR), so only those are read."""
    line = '(APIServer pid=4100) INFO:     10.1.0.7:5123 - "POST /v1/chat/completions HTTP/1.1" {status}\n'
    assert not KEY_BYTES.search(line.format(status="200 OK").encode())
    assert KEY_BYTES.search(line.format(status="400 Bad Request").encode())
    assert KEY_BYTES.search(line.format(status="500 Internal Server Error").encode())


@pytest.mark.parametrize(
    "system,machine,installs",
    [
        ("linux", "x86_64", True),
        ("linux", "aarch64", True),
        ("darwin", "arm64", True),
        ("win32", "AMD64", True),
        ("linux", "ppc64le", False),
        ("linux", "s390x", False),
        ("win32", "ARM64", False),
    ],
)
def test_re2_is_required_only_where_it_has_wheels(system, machine, installs):
    """Where google-re2 has no wheel its source build needs the RE2 C++ library and would fail `pip install oomkit`:
    the dependency's marker leaves it out there, and the fallback reads the same lines."""
    tomllib = pytest.importorskip("tomllib")
    requirements = pytest.importorskip("packaging.requirements")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (spec,) = [dep for dep in project["dependencies"] if dep.startswith("google-re2")]
    marker = requirements.Requirement(spec).marker
    assert marker is not None
    assert marker.evaluate({"sys_platform": system, "platform_machine": machine}) is installs


def test_re2_holds_the_keys_dfa_in_its_budget(capfd):
    """RE2 past its memory budget logs "DFA out of memory" on every search and falls back to its slower NFA: the key is
    compiled with a budget its DFA fits in (the default 8 MiB stopped holding it at about 16,700 characters of key)."""
    pytest.importorskip(
        "re2", reason="google-re2 is not installed: the prefilter runs Python's re, which has no DFA budget"
    )
    from oomkit.triage import fast

    fast.scan_key.cache_clear()
    if fast.engine_name() != "re2":
        pytest.skip("this RE2 build rejected the key, so the prefilter runs Python's re, which has no DFA budget")
    text = b"".join(path.read_bytes() for path in LOGS[:400])
    assert sum(1 for _ in fast.scan_key().finditer(text)) > 0
    assert "DFA out of memory" not in capfd.readouterr().err
