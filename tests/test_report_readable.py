"""The report and the console read as text for people: rendered from real run folders (the testbed
ladders, the cache-vs-context comparison, launches from real CPU logs, imported `vllm bench` results),
no text a reader sees holds a raw dict or a number with more than three decimals. Lines quoted from
logs and servers are shown as written, so they are the one thing left out of the check."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _load_fake_server import FakeOpenAI
from test_bench import WL
from test_decide import FIX, copy_run, launch_folder, requirements
from test_decide_compare import folders

from oomkit.bench import BenchOptions, bench
from oomkit.bench.render import render as render_bench
from oomkit.compare.render import render as render_compare
from oomkit.decide import DecideOptions, decide
from oomkit.decide.render import render as render_decision
from oomkit.ladder.render import render as render_ladder
from oomkit.ladder.run import LadderResult
from oomkit.loadrun.prepare import TargetSpec
from oomkit.report import render
from oomkit.report.svg import nice_ticks
from oomkit.units import fmt_pct

RAW_DICT = re.compile(r"\{'|\{\"")
LONG_FLOAT = re.compile(r"\d+\.\d{4,}")
IMPORTS = FIX / "imports"
MD_ESCAPE = re.compile(r"([\\`<>&\[\]|])")


def _decision(tmp_path: Path, runs: list[Path], team: str = "production", **req) -> Path:
    d = decide(
        [str(r) for r in runs],
        str(requirements(tmp_path, **req)),
        DecideOptions(team=team, runs_dir=str(tmp_path / "d")),
    )
    return d.run_dir


# Each scenario: the folder to report on (a decision folder or a run folder), from real run folders.
SCENARIOS: dict[str, Callable[[Path], Path]] = {
    "ladder decision": lambda t: _decision(t, [copy_run(t, "ladder-small-kv")]),
    "comparison decision": lambda t: _decision(t, list(folders(t))),
    "setup rejects tool calls": lambda t: _decision(t, [copy_run(t, "ladder-no-tool-parser")]),
    "engine error": lambda t: _decision(t, [copy_run(t, "ladder-hybrid-engine-error")]),
    "weights do not fit": lambda t: _decision(t, [launch_folder(t, "oom_weights_memoryerror.log")]),
    "kv pool too small": lambda t: _decision(t, [launch_folder(t, "kv_bytes_too_small.log")]),
    "imported vllm bench": lambda t: _decision(
        t, [IMPORTS / "vllm-bench-c2.json", IMPORTS / "vllm-bench-c4.json"], concurrent_dialogs=2
    ),
    "ladder run, no decision": lambda t: copy_run(t, "ladder-small-kv"),
}


class _Text(HTMLParser):
    """The text a reader sees (SVG labels included), without <style>, <title> and quoted lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("style", "title") or (tag == "pre" and ("class", "quote") in attrs):
            self._skip.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._skip and self._skip[-1] == tag:
            self._skip.pop()

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return "\n".join(parser.parts)


def quoted(folder: Path) -> list[str]:
    """The lines a report quotes as written: evidence text from logs and servers, the launch command."""
    data = json.loads(render(str(folder), "json", out=str(folder / "q.json")).read_text())
    evidence = (data.get("decision") or {}).get("evidence") or []
    texts = [str(e["text"]) for e in evidence if isinstance(e, dict) and e.get("text")]
    return texts + [" ".join(data["environment"]["command"])]


def unreadable(text: str, verbatim: list[str] = ()) -> list[str]:
    """Raw dicts and over-long decimals in `text`, once the verbatim lines are taken out (as written,
    as the Markdown report escapes them in text, and cut at 140 characters as the console does)."""
    for line in sorted(verbatim, key=len, reverse=True):
        for form in (line, MD_ESCAPE.sub(r"\\\1", line)):
            text = text.replace(form, "").replace(form[:140], "")
    return [m.group(0) for p in (RAW_DICT, LONG_FLOAT) for m in p.finditer(text)]


@pytest.fixture(params=list(SCENARIOS))
def folder(request, tmp_path) -> Path:
    return SCENARIOS[request.param](tmp_path)


def test_the_html_report_reads_as_text(folder):
    html = render(str(folder), "html", now="2026-12-02T00:00:00+00:00").read_text()
    assert unreadable(html_text(html), quoted(folder)) == []
    assert html.count("<svg") == 6


def test_the_markdown_report_reads_as_text(folder):
    md = render(str(folder), "md", now="2026-12-02T00:00:00+00:00").read_text()
    assert unreadable(md, quoted(folder)) == []


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "ladder run, no decision"])
def test_the_decision_console_reads_as_text(tmp_path, name):
    folder = SCENARIOS[name](tmp_path)
    assert unreadable(render_decision(json.loads((folder / "decision.json").read_text())), quoted(folder)) == []


def test_the_verdict_comes_first_with_its_reason(tmp_path):
    folder = SCENARIOS["comparison decision"](tmp_path)
    decision = json.loads((folder / "decision.json").read_text())
    text = html_text(render(str(folder), "html").read_text())
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[:3] == ["oomkit report: expand", "verdict: expand", decision["summary"]]
    md = render(str(folder), "md").read_text().splitlines()
    assert md[2] == f"**Verdict: `expand`**: {decision['summary']}"
    assert render_decision(decision).splitlines()[1] == f"why:       {decision['summary']}"


def test_every_ladder_rung_the_knee_and_the_reserve_are_drawn(tmp_path):
    folder = SCENARIOS["comparison decision"](tmp_path)
    html = render(str(folder), "html").read_text()
    text = html_text(html)
    # Ladder rungs 1-4 and the compared cells at 2 and 4: 6 dots per chart against concurrency.
    peak = html.split("Peak memory vs concurrency</title>")[1].split("</svg>")[0]
    assert peak.count("<circle") == 6 + 3  # and the legend's: one per series, one for a level that fails
    assert "ladder rungs (measured)" in text and "compared cells (measured)" in text
    assert "knee: 2 holds, 3 fails (measured)" in text and "target + 25% reserve = 5 (required)" in text
    assert "vLLM's estimate at max_model_len: 1.5 (planned)" in text
    assert 'stroke-dasharray="7 4"' in peak and 'stroke-dasharray="2 3"' in peak and 'fill-opacity="0.15"' in peak
    ticks = re.findall(r'text-anchor="middle">([\d.]+)</text>', peak)
    assert ticks == ["0", "1", "2", "3", "4", "5"]  # whole dialogs only, up to the target with reserve
    assert "| 3 | no | 1 preemptions (the KV cache ran out) | 1.82 GiB | 90.9% | 1 | 332 ms | 963 ms |" in (
        render(str(folder), "md").read_text()
    )


def test_evidence_is_a_file_line_and_the_quoted_line(tmp_path):
    folder = SCENARIOS["weights do not fit"](tmp_path)
    decision = json.loads((folder / "decision.json").read_text())
    ev = decision["evidence"][0]
    html = render(str(folder), "html").read_text()
    where = f"{Path(ev['run']) / ev['file']}:{ev['line']}"
    assert f"<code>{where}</code><pre class='quote'>" in html
    assert f"- `{where}`: `" in render(str(folder), "md").read_text()


def test_the_ladder_console_reads_as_text():
    for name in ("ladder-small-kv", "ladder-no-tool-parser", "ladder-hybrid-engine-error"):
        out = render_ladder(LadderResult.from_dict(json.loads((FIX / name / "ladder.json").read_text())))
        assert unreadable(out) == [], name
    out = render_ladder(LadderResult.from_dict(json.loads((FIX / "ladder-small-kv" / "ladder.json").read_text())))
    assert "knee: at concurrency 3 (preemption; last good 2)" in out and "context limit: 1024 tokens" in out


def test_the_compare_console_reads_as_text(tmp_path):
    _, comp = folders(tmp_path)
    out = render_compare(json.loads((comp / "compare.json").read_text()), str(comp))
    assert unreadable(out) == []
    baseline = next(line for line in out.splitlines() if line.startswith("baseline"))
    assert baseline.split() == ["baseline", "baseline", "1.82", "GiB", "100%", "69.1%", "779", "ms"] + [
        "1357",
        "ms",
        "3431",
        "ms",
        "4",
        "0",
        "100%",
    ]


def test_the_bench_console_reads_as_text(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(json.dumps(WL))
    with FakeOpenAI(kv_capacity=2, token_delay_s=0.002) as fake:
        r = bench(
            TargetSpec(url=fake.url, runs_dir=str(tmp_path / "runs")),
            str(workload),
            BenchOptions(3, slos={"ttft_ms": 10_000}),
        )
    out = render_bench(r)
    assert unreadable(out) == [], out
    rate = r.server.prefix_cache_hit_rate
    assert rate is not None and fmt_pct(rate) in out and str(rate) not in out


def test_the_agent_team_checklist_reads_as_text(tmp_path):
    folder = _decision(tmp_path, list(folders(tmp_path)), team="agent")
    found = unreadable(html_text(render(str(folder), "html").read_text()), quoted(folder))
    assert found == []  # decide/teams.py writes "hit rate per mode: baseline 69.8%, ...", not a dict


@pytest.mark.parametrize("hi", [1, 2.5, 3.3, 5, 17, 256, 4096])
def test_concurrency_ticks_are_whole_dialogs(hi):
    ticks = nice_ticks(0, hi, integer=True, n=6)
    assert all(float(t).is_integer() for t in ticks) and ticks[0] == 0 and ticks[-1] >= hi and len(ticks) <= 8
