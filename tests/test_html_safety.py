"""HTML safety of `oomkit report`: script, attribute, URL and CSS payloads planted in everything that
reaches a report from logs and servers (server.log lines that become triage evidence, model names,
request errors, metric names and labels, compared modes, cells and notes) come out as text. A real
HTML parser checks the elements and attributes, the Content-Security-Policy and that nothing loads
from the network; the Markdown report goes through a CommonMark renderer and the same checks."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_decide import copy_run, requirements
from test_decide_compare import folders
from test_report import CHROMIUM_FLAGS

from oomkit.cli import main
from oomkit.decide import DecideOptions, decide
from oomkit.report import render
from oomkit.triage import analyse

PAYLOADS = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(1)",
    "javascript:alert(1)",
    "</style><script>",
    "]]><svg onload=alert(1)>",
    '<a href="http://evil.invalid/">',
    "url(http://evil.invalid/x)",
    "@import 'http://evil.invalid'",
)
ALL = " ".join(PAYLOADS)  # all at once: one may open what another closes
# Would change the page title if any of it ran (the Chromium check reads the title back).
PWN = (
    "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
    "<svg onload=\"document.title='pwned'\">"
)
SVG_NS = "http://www.w3.org/2000/svg"
VERDICTS = ("tune", "expand", "fix_environment", "inconclusive")
# Every element the report template writes; anything else came from a payload.
HTML_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "p",
    "div",
    "b",
    "code",
    "pre",
    "ul",
    "li",
    "table",
    "tr",
    "th",
    "td",
    "span",
    "svg",
    "text",
    "rect",
    "line",
    "polyline",
    "circle",
}
MD_TAGS = {"h1", "h2", "p", "strong", "em", "code", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "hr"}
VOID = {"meta", "br", "hr", "img", "input", "link", "base", "area", "col", "embed", "source", "track", "wbr"}
LOADING_ATTRS = {
    "src",
    "href",
    "xlink:href",
    "srcset",
    "action",
    "formaction",
    "poster",
    "data",
    "background",
    "style",
    "http-equiv",
}


def planted(place: str, payload: str) -> str:
    """The payload with the place it was planted in: the report must show it there, as text."""
    return f"{place}:{payload}"


# -- the run folders, payloads planted where logs and servers put text --------------------------

LOG = [
    "(APIServer pid=1) INFO 12-02 16:30:47 [api_utils.py:347]  version 0.32.0",
    "(APIServer pid=1) INFO 12-02 16:30:47 [api_utils.py:286] non-default args: "
    "{{'host': '127.0.0.1', 'model': '{model}'}}",
    "(EngineCore pid=5526) INFO 12-02 16:30:56 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='{model}', tensor_parallel_size=1",
    "(Worker pid=5546) INFO 12-02 16:31:05 [cpu_model_runner.py:68] Starting to load model {model}...",
    "(Worker pid=5546) INFO 12-02 16:31:05 [default_loader.py:501] Loading weights took 0.01 seconds",
    "(Worker pid=5546) INFO 12-02 15:45:09 [cpu_worker.py:260] Explicitly set (0.0/8.96) GiB for KV cache on node 0.",
    "(EngineCore pid=5526) ERROR 12-02 15:45:10 [core.py:1510] ValueError: To serve at least one request with the "
    "model's max seq len (4096), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.0 GiB). Based on the available memory, the estimated maximum model length is 1792. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. {log}",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}} {log}",
]


def _plant_manifest(folder: Path, p: str) -> None:
    """The model (profile, command, served name), the run label and the profile file of a run."""
    m = json.loads((folder / "manifest.json").read_text())
    model = planted("model", p)
    m["profile"] = {**(m.get("profile") or {}), "model": model, "label": planted("label", p)}
    m.update(label=planted("label", p), profile_file=planted("profile", p), served_models=[model])
    m["command"] = [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        planted("served-model", p),
    ]
    (folder / "manifest.json").write_text(json.dumps(m))


def launch_run(tmp_path: Path, p: str) -> Path:
    """A launch that failed before ready, as `oomkit launch` leaves it: server.log triaged by oomkit."""
    folder = tmp_path / "runs" / "launch"
    folder.mkdir(parents=True)
    log = folder / "server.log"
    log.write_text("\n".join(LOG).format(model=planted("model", p), log=planted("log", p)) + "\n")
    t = analyse([str(log)]).to_dict()
    assert any(planted("log", p) in e["text"] for e in t["verdict"]["evidence"])
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "oomkit.run/1",
                "run_id": "launch",
                "kind": "launch",
                "state": "failed",
                "oomkit_version": "0.1.0",
                "files": {"manifest.json": "this file", "server.log": "log"},
                "profile": {"args": {}},
                "ready": False,
                "reason": "exited_before_ready",
                "verdict": t["verdict"],
                "figures": t["facts"]["figures"],
                "phases": [{"phase": x["phase"], "line": x["line"]} for x in t["timeline"]],
                "env_snapshot": {
                    "source": "live",
                    "gpus": [{"name": planted("gpu", p), "memory_total_bytes": 2**30}],
                    "software": {"cuda_flavour": "cpu", "vllm_version": planted("vllm-version", p)},
                },
            }
        )
    )
    _plant_manifest(folder, p)
    return folder


def _rewrite_jsonl(path: Path, change) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in rows))


def _plant_metrics(folder: Path, p: str) -> None:
    label = planted("metric-label", p).replace("\\", "\\\\").replace('"', '\\"')

    def change(row: dict[str, Any]) -> dict[str, Any]:
        samples = {k.replace('engine="0"', f'engine="{label}"'): v for k, v in row["samples"].items()}
        samples[f'{planted("metric-name", p)}{{x="{label}"}}'] = 1.0
        return {**row, "label": planted("metric-row", p), "samples": samples}

    _rewrite_jsonl(folder / "metrics.jsonl", change)


def ladder_run(tmp_path: Path, p: str) -> Path:
    """The ladder that stopped at tool_call with HTTP 400: the server's error text is the payload."""
    folder = copy_run(tmp_path, "ladder-no-tool-parser")
    error = "HTTP 400: " + json.dumps({"error": {"message": planted("request-error", p), "code": 400}})
    _rewrite_jsonl(folder / "requests.jsonl", lambda r: {**r, "error": error} if r["error"] else r)
    lad = json.loads((folder / "ladder.json").read_text())
    for step in lad["steps"]:
        step["notes"] = [planted("step-note", p)]
        for ev in (step.get("failure") or {}).get("evidence", []):
            if "text" in ev:
                ev["text"] = error
    lad["poc"]["untested"].append(planted("untested", p))
    (folder / "ladder.json").write_text(json.dumps(lad))
    (folder / "poc.json").write_text(json.dumps(lad["poc"]))
    _plant_metrics(folder, p)
    _plant_manifest(folder, p)
    return folder


def compare_runs(tmp_path: Path, p: str) -> tuple[Path, Path]:
    """The investigation: a compared mode, its factor, value, notes, cells and metric names are payloads."""
    ladder, comp = folders(tmp_path)
    _plant_metrics(ladder, p)
    _plant_manifest(ladder, p)
    data = json.loads((comp / "compare.json").read_text())
    mode = planted("mode", p)
    data["modes"].append(
        {
            "name": mode,
            "factor": planted("factor", p),
            "value": planted("value", p),
            "side": "client",
            "baseline_value": None,
            "notes": [planted("mode-note", p)],
        }
    )
    base = next(c for c in data["cells"] if c["mode"] == "baseline")
    data["cells"] += [
        {**base, "label": planted("cell-label", p), "errors": 1, "errors_by_kind": {planted("error-kind", p): 1}},
        {**base, "mode": mode, "label": "x#1"},
    ]
    metric = dict(
        data["comparisons"]["lower-concurrency"][0],
        metric=planted("compare-metric", p),
        verdict=planted("compare-verdict", p),
        reason=planted("compare-reason", p),
    )
    data["comparisons"][mode] = [metric]
    data["notes"].append(planted("compare-note", p) + " skipped")
    data["launch_failures"] = {planted("launch-failure", p): {"phase": planted("launch-phase", p)}}
    (comp / "compare.json").write_text(json.dumps(data))
    (comp / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in data["cells"]))
    return ladder, comp


def decision(tmp_path: Path, runs: list[Path]) -> Path:
    d = decide([str(r) for r in runs], str(requirements(tmp_path)), DecideOptions(runs_dir=str(tmp_path / "d")))
    return d.run_dir


# Each scenario and the places whose text its reports show. The HTML report has no table of load
# points (no cell labels); the Markdown one leaves out the profile file and the mode notes; the JSON
# one has everything, the metrics rows' labels too (timelines). The other planted places (run label,
# step notes, metric names and labels, error kinds, comparison reasons) reach no report: the checks
# below still see that none of their text turns into markup.
SCENARIOS = {
    "launch": (
        lambda t, p: decision(t, [launch_run(t, p)]),
        ("log", "model", "served-model", "profile", "gpu", "vllm-version"),
    ),
    "ladder": (
        lambda t, p: decision(t, [ladder_run(t, p)]),
        ("request-error", "model", "served-model", "profile", "untested"),
    ),
    "ladder run": (ladder_run, ("model", "served-model", "profile", "untested")),
    "compare": (
        lambda t, p: decision(t, list(compare_runs(t, p))),
        (
            "mode",
            "factor",
            "value",
            "mode-note",
            "cell-label",
            "compare-metric",
            "compare-verdict",
            "compare-note",
            "launch-failure",
            "launch-phase",
            "model",
            "served-model",
            "profile",
        ),
    ),
}
LEFT_OUT = {"html": ("cell-label",), "md": ("profile", "mode-note"), "json": ()}


def shown(scenario: str, fmt: str) -> tuple[str, ...]:
    places = SCENARIOS[scenario][1] + (("metric-row",) if fmt == "json" and scenario != "launch" else ())
    return tuple(p for p in places if p not in LEFT_OUT[fmt])


# -- the checker --------------------------------------------------------------------------------


class Page(HTMLParser):
    """Elements, attributes, text (entities decoded) and style of a document; `problems` lists
    everything that could run, load or navigate."""

    def __init__(self, allowed: set[str]):
        super().__init__(convert_charrefs=True)
        self.allowed, self.problems, self.text, self.style, self.title = allowed, [], [], [], ""
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self._open.append(tag)
        if tag not in self.allowed:
            self.problems.append(f"element <{tag}>")
        for name, value in attrs:
            self._attr(tag, name, value or "")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self._open.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag) :]

    def _attr(self, tag: str, name: str, value: str) -> None:
        squeezed = "".join(value.split()).lower()
        if name.startswith("on"):
            self.problems.append(f"<{tag} {name}=...>: an event handler")
        if "javascript:" in squeezed or "vbscript:" in squeezed:
            self.problems.append(f"<{tag} {name}={value!r}>: a script URL")
        if (tag, name) == ("meta", "http-equiv") and value == "Content-Security-Policy":
            return
        if name in LOADING_ATTRS:
            self.problems.append(f"<{tag} {name}={value!r}>: loads or navigates")
        namespace = (tag, name, value) == ("svg", "xmlns", SVG_NS)
        if any(s in squeezed for s in ("http:", "https:", "//", "url(")) and not namespace:
            self.problems.append(f"<{tag} {name}={value!r}>: a URL")

    def handle_data(self, data: str) -> None:
        if self._open[-2:] == ["head", "title"]:
            self.title += data
        (self.style if self._open and self._open[-1] == "style" else self.text).append(data)

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"comment {data!r}")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"processing instruction {data!r}")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"declaration {data!r}")

    @classmethod
    def parse(cls, html: str, allowed: set[str] = HTML_TAGS) -> Page:
        page = cls(allowed)
        page.feed(html)
        page.close()
        style = "".join(page.style).lower()
        page.problems += [f"style has {s}" for s in ("url(", "@import", "expression(", "http", "//") if s in style]
        return page

    def shows(self, text: str) -> bool:
        """`text` is in the document as text, plainly or as a JSON string inside a shown value."""
        shown = "".join(self.text)
        return text in shown or json.dumps(text)[1:-1] in shown


def csp_problems(page: Page) -> list[str]:
    """The policy must be the first element of <head>, the only one, and allow no script or URL."""
    tags = [t for t, _ in page.tags]
    csp = [a for t, a in page.tags if t == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy"]
    first = page.tags[tags.index("head") + 1] if "head" in tags[:-1] else None
    if len(csp) != 1 or first is None or first[1] is not csp[0]:
        return [f"not one CSP meta first in <head> ({len(csp)} CSP metas; head starts with {first})"]
    policy = {d.split()[0]: d.split()[1:] for d in (csp[0].get("content") or "").split(";") if d.strip()}
    out = [] if policy.get("default-src") == ["'none'"] else [f"default-src {policy.get('default-src')}"]
    for name, sources in policy.items():
        if name.startswith("script-src") and sources != ["'none'"]:
            out.append(f"{name} {sources}")
        for src in sources:
            unsafe = src in ("'unsafe-eval'", "*", "http:", "https:") or "://" in src
            unsafe |= src == "'unsafe-inline'" and name != "style-src"  # inline CSS only, never inline script
            unsafe |= src == "data:" and name != "img-src"
            if unsafe:
                out.append(f"{name} allows {src}")
    return out


def assert_safe(html: str, payload: str, places: tuple[str, ...], allowed: set[str] = HTML_TAGS) -> Page:
    page = Page.parse(html, allowed)
    assert page.problems == []
    if "<" in payload:
        assert payload not in html, "a payload is in the document unescaped"
    missing = [place for place in places if not page.shows(planted(place, payload))]
    assert missing == [], f"planted text not shown (as text) for {missing}"
    return page


# -- the tests ----------------------------------------------------------------------------------


@pytest.fixture(params=PAYLOADS + (ALL,), ids=[f"payload{i}" for i in range(len(PAYLOADS))] + ["all"])
def payload(request) -> str:
    return request.param


def report(tmp_path: Path, scenario: str, payload: str, fmt: str) -> str:
    folder = SCENARIOS[scenario][0](tmp_path, payload)
    return render(str(folder), fmt, out=str(tmp_path / f"report.{fmt}"), now="2026-12-02T00:00:00+00:00").read_text()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_html_report_shows_payloads_only_as_text(tmp_path, payload, scenario):
    page = assert_safe(report(tmp_path, scenario, payload, "html"), payload, shown(scenario, "html"))
    assert csp_problems(page) == []
    assert page.title in ("oomkit report: measurements", *(f"oomkit report: {v}" for v in VERDICTS))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_markdown_report_renders_payloads_as_text(tmp_path, payload, scenario):
    # Markdown viewers pass raw HTML through: render it as CommonMark does and check the result.
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py renders the Markdown report here")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(report(tmp_path, scenario, payload, "md"))
    assert_safe(html, payload, shown(scenario, "md"), MD_TAGS)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_json_report_keeps_payloads_as_data(tmp_path, payload, scenario):
    strings = "\n".join(_strings(json.loads(report(tmp_path, scenario, payload, "json"))))
    for place in shown(scenario, "json"):
        text = planted(place, payload)
        assert text in strings or json.dumps(text)[1:-1] in strings, place  # the server's error is a JSON body


def test_oomkit_report_writes_the_same_safe_reports(tmp_path, capsys):
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py renders the Markdown report here")
    folder = SCENARIOS["compare"][0](tmp_path, ALL)
    for fmt in ("html", "md", "json"):
        out = tmp_path / f"cli.{fmt}"
        with pytest.raises(SystemExit) as code:
            main(["report", str(folder), "--format", fmt, "-o", str(out)])
        assert code.value.code == 0 and capsys.readouterr().out.strip() == str(out)
        text = out.read_text()
        if fmt == "html":
            assert csp_problems(assert_safe(text, ALL, shown("compare", fmt))) == []
        elif fmt == "md":
            html = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
            assert_safe(html, ALL, shown("compare", fmt), MD_TAGS)
        else:
            assert planted("mode", ALL) in _strings(json.loads(text)["modes"])


@pytest.mark.parametrize("fmt", ["html", "md", "json"])
def test_escaping_leaves_secrets_to_redaction(tmp_path, fmt):
    # Escaped first, `api_key=['...']` would read `api_key=\['...'\]` in Markdown: no longer a secret.
    folder = copy_run(tmp_path, "ladder-small-kv")
    lad = json.loads((folder / "ladder.json").read_text())
    lad["poc"]["untested"] += ["api_key=['abcdef0123456789']", "token: [abcdef0123456789]"]
    (folder / "ladder.json").write_text(json.dumps(lad))
    text = render(str(folder), fmt, out=str(tmp_path / f"r.{fmt}")).read_text()
    assert "abcdef0123456789" not in text and "***" in text


# -- the checker itself must catch what it is for ---------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "<script>alert(1)</script>",
        "<img src=x>",
        "<p onclick='x()'>",
        "<div title='javascript:alert(1)'>",
        "<span class='http://evil.invalid/'>",
        "<style>b{background:url(http://evil.invalid/x)}</style>",
        "<style>@import 'x.css';</style>",
        "<a href='#'>",
        "<!-- x -->",
        "<![CDATA[x]]>",
        "<iframe>",
        "<p style='x'>",
        "<meta http-equiv='refresh' content='0;url=http://evil.invalid/'>",
    ],
)
def test_the_checker_finds_planted_markup(bad):
    assert Page.parse(f"<html><head></head><body>{bad}</body></html>").problems


@pytest.mark.parametrize(
    "policy, ok",
    [
        ("default-src 'none'; style-src 'unsafe-inline'", True),
        ("default-src 'none'; script-src 'self'", False),
        ("default-src 'none'; style-src 'unsafe-inline' 'unsafe-eval'", False),
        ("default-src 'self'", False),
        ("default-src 'none'; script-src 'unsafe-inline'", False),
        ("default-src 'none'; style-src https://cdn.invalid", False),
    ],
)
def test_the_checker_judges_the_policy(policy, ok):
    page = Page.parse(f"<html><head><meta http-equiv='Content-Security-Policy' content=\"{policy}\"></head></html>")
    assert (csp_problems(page) == []) is ok
    late = Page.parse(f"<html><head><title>t</title><meta http-equiv='Content-Security-Policy' content=\"{policy}\">")
    assert csp_problems(late)


@pytest.mark.parametrize("scenario", ["launch", "ladder", "compare"])
def test_chromium_runs_no_payload(tmp_path, scenario):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    page = tmp_path / "report.html"
    page.write_text(report(tmp_path, scenario, ALL + PWN, "html"))
    title = Page.parse(page.read_text()).title
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    parsed = Page.parse(dom, HTML_TAGS | {"tbody"})  # the browser adds tbody to tables
    assert parsed.problems == [] and parsed.title == title and "pwned" not in title
    assert all(parsed.shows(planted(place, ALL + PWN)) for place in shown(scenario, "html"))
