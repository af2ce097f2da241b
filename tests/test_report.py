"""`oomkit report`: HTML (self-contained, restrictive CSP, everything escaped, rendered in real
headless Chromium), Markdown and JSON, from a decision folder or a run folder."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from test_decide import copy_run, requirements

from oomkit.cli import main
from oomkit.decide import DecideOptions, decide
from oomkit.report import render, report_data

EVIL = '<script>alert("x")</script><img src=http://example.invalid/a.png>'
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


@pytest.fixture
def decision(tmp_path):
    run = copy_run(tmp_path, "ladder-small-kv")
    m = json.loads((run / "manifest.json").read_text())
    m["command"] = m["command"] + [EVIL]  # what a server or a log could put in front of a reader
    m["profile_file"] = EVIL
    (run / "manifest.json").write_text(json.dumps(m))
    return decide([str(run)], str(requirements(tmp_path)), DecideOptions(runs_dir=str(tmp_path / "d")))


def test_html_is_self_contained_and_escaped(decision):
    path = render(str(decision.run_dir), "html", now="2026-12-02T00:00:00+00:00")
    html = path.read_text()
    assert path == decision.run_dir / "report.html"
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "<link" not in html and "@import" not in html and "url(" not in html
    for title in (
        "Peak memory vs concurrency",
        "KV cache usage vs concurrency",
        "TTFT and latency vs concurrency",
        "Prefix-cache hit rate per mode",
        "KV cache usage over time",
        "Preemptions over time",
    ):
        assert title in html
    assert html.count("<svg") == 6 and "verdict: expand" in html and "concurrency_headroom" in html
    assert "Decision checklist" in html and "Untested scenarios" in html and "launch command" in html


def test_markdown_and_json(decision):
    md = render(str(decision.run_dir), "md", now="T").read_text()
    assert md.startswith("# oomkit report: expand") and "| capacity (highest level that holds) | 2 |" in md
    assert "## Decision checklist" in md and "## Untested scenarios" in md
    data = json.loads(render(str(decision.run_dir), "json", now="T").read_text())
    assert data["schema"] == "oomkit.report/1" and data["decision"]["verdict"] == "expand"
    assert [p["concurrency"] for p in data["load_points"]] == [1, 2, 4, 3]
    assert data["timelines"] and any(p["preemptions"] for p in data["timelines"][0]["points"])


def test_report_of_a_run_without_decision(tmp_path):
    run = copy_run(tmp_path, "ladder-small-kv")
    data = report_data(str(run))
    assert data["decision"] is None and len(data["load_points"]) == 4
    html = render(str(run), "html").read_text()
    assert "no decision yet" in html and "oomkit decide" in html


def test_cli(decision, tmp_path, capsys):
    out = tmp_path / "r.md"
    with pytest.raises(SystemExit) as code:
        main(["report", str(decision.run_dir), "--format", "md", "-o", str(out)])
    assert code.value.code == 0 and out.read_text().startswith("# oomkit report")
    with pytest.raises(SystemExit) as code:
        main(["report", str(tmp_path / "missing")])
    assert code.value.code == 2 and "oomkit: error" in capsys.readouterr().err


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and raw RGB(A) rows of an 8-bit PNG (filters undone): enough to see colours."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 4
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    out, prev = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            pred = {0: 0, 1: a, 2: b, 3: (a + b) // 2}.get(kind)
            if pred is None:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            line[i] = (line[i] + pred) & 0xFF
        out += line
        prev = line
    return width, height, bytes(out)


def test_rendered_in_headless_chromium(decision, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    html = render(str(decision.run_dir), "html")
    flags = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, "--window-size=1200,1600", f"--screenshot={shot}", html.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    dom = subprocess.run(
        [*flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "verdict: expand" in dom and "concurrency_headroom" in dom
    width, height, pixels = _png_pixels(shot)
    assert (width, height) == (1200, 1600)
    channels = len(pixels) // (width * height)
    colours = {pixels[i : i + 3] for i in range(0, len(pixels), channels * 97)}
    dark = sum(1 for i in range(0, len(pixels), channels * 13) if sum(pixels[i : i + 3]) < 200)
    assert len(colours) > 20 and dark > 200  # text and charts, not a blank page


def test_report_with_a_comparison_charts_hit_rate_per_mode(tmp_path):
    from test_decide_compare import folders

    ladder, comp = folders(tmp_path)
    d = decide([str(ladder), str(comp)], str(requirements(tmp_path)), DecideOptions(runs_dir=str(tmp_path / "d")))
    data = report_data(str(d.run_dir))
    assert [h["mode"] for h in data["hit_rates"]] == ["baseline", "lower-concurrency", "shorter-history"]
    assert all(0 < h["hit_rate"] < 1 for h in data["hit_rates"]) and len(data["timelines"]) == 1
    html = render(str(d.run_dir), "html").read_text()
    assert "lower-concurrency" in html and "history_turns = 1" in html and "retention: skipped" in html
