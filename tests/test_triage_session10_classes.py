"""Classes of session 10 (issue 13). The API server's route listing (vllm/entrypoints/launcher.py serve_http,
launchers/launcher.py in 0.32: "Available routes are:" then one "Route: ..." per route) is printed after the
engine client is built, so the engine is ready. And terminal output pasted as HTML (aha, ansi2html, a browser's
copy of a coloured terminal): the colour and weight tags are not part of the log; a traceback's `<module>` is."""

from pathlib import Path

import pytest
from _triage_synth import Case, verdict_of

from oomkit.logs.line import clean, parse_line

ROUTES = (
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:37] Available routes are:\n"
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:46] Route: /openapi.json, Methods: HEAD, GET\n"
    "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:46] Route: /health, Methods: GET\n"
)
HTML_PREFIX = '<font color="#2AA1B3"><b>(APIServer pid=128291)</b></font> '
HTML_READY = (
    HTML_PREFIX + "INFO 11-11 12:22:01 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
)
CASES = {
    "routes_listed": Case(ROUTES, "healthy", False, "medium"),
    "html_pasted_ready": Case(HTML_READY, "healthy", False, "medium"),
    "html_pasted_oom": Case(
        HTML_PREFIX.replace("APIServer", "EngineCore_DP0")
        + "ERROR 11-11 12:22:05 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.\n",
        "weight_loading",
        True,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session10_class(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    verdict = verdict_of(name, case, tmp_path)
    assert (verdict.phase, verdict.is_oom) == (case.phase, case.is_oom)
    if case.confidence:
        assert verdict.confidence == case.confidence


def test_html_tags_are_peeled_and_entities_decoded() -> None:
    record = parse_line(HTML_PREFIX + "WARNING 11-11 12:22:01 [x.py:1] max_num_seqs &gt; 256 &amp; more</span>")
    assert (record.pid, record.level, record.msg) == (128291, "WARNING", "max_num_seqs > 256 & more")


@pytest.mark.parametrize(
    "line",
    [
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/x/vllm/entrypoints/cli/main.py", line 73, in <module>',
        "a <b> that is not closed stays as typed",
        "x &gt; y without a tag stays as typed",
    ],
)
def test_text_without_formatting_tags_is_unchanged(line: str) -> None:
    assert clean(line) == line
