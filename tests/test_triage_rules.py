"""The rule tables are data: every entry is complete, its example matches, and the prefilter
keeps it (a rule the prefilter drops would silently never fire on a large log)."""

import pytest

from oomkit.logs import parse_line
from oomkit.triage.failures import FAILURES
from oomkit.triage.figures import FIGURES
from oomkit.triage.markers import MARKERS
from oomkit.triage.prefilter import LIVE_KEY as KEY
from oomkit.triage.rules import PHASES, TIMELINE

RULES = list(MARKERS) + list(FAILURES)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_example_matches_and_passes_prefilter(rule):
    assert rule.pattern.search(rule.example), rule.id
    assert KEY.search(rule.example), f"{rule.id}: example has no prefilter keyword"
    assert rule.source


def test_ids_unique_and_vocabulary():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for m in MARKERS:
        assert m.phase in TIMELINE and (m.after in PHASES or m.after in TIMELINE)
    for f in FAILURES:
        assert f.phase is None or f.phase in PHASES
        assert all(x in ids for x in f.excludes)


def test_markers_reach_their_phase_as_a_full_line():
    for m in MARKERS:
        r = parse_line(f"(EngineCore pid=1) INFO 12-02 10:00:00 [x.py:1] {m.example}")
        assert m.pattern.search(r.msg), m.id


def test_figure_sources_noted():
    assert all(f.source for f in FIGURES)


def _corpus_checker():  # noqa: ANN202 - a module loaded from its path
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "corpus" / "check_corpus.py"
    spec = importlib.util.spec_from_file_location("check_corpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_checker_knows_the_same_phases():
    """corpus/check_corpus.py repeats the phase list so it runs before oomkit is installed: keep them equal."""
    assert _corpus_checker().PHASES == set(PHASES)


def _duplicates_among(tmp_path, urls: tuple[str, ...]) -> list[str]:  # noqa: ANN001 - pytest's tmp_path
    """The duplicate check's problems for cases a001, b001, ... citing `urls` in order."""
    import json

    for index, url in enumerate(urls):
        (tmp_path / f"{chr(ord('a') + index)}001.json").write_text(json.dumps({"source_url": url}))
    return _corpus_checker().duplicate_sources(sorted(tmp_path.glob("*.json")))


def test_corpus_checker_finds_one_thread_spelled_with_other_capitals(tmp_path):
    """GitHub's owner and repository names are case-insensitive: one thread under two spellings is one thread, which
    must not sit on both sides of the split."""
    problems = _duplicates_among(
        tmp_path,
        (
            "https://github.com/sherdencooper/GPTFuzz/issues/27",
            "https://github.com/sherdencooper/gptfuzz/issues/27",
            "https://github.com/sherdencooper/gptfuzz/issues/28",
        ),
    )
    assert len(problems) == 1 and problems[0].startswith("b001.json: same thread as a001.json")


def test_corpus_checker_finds_one_forum_topic_under_two_addresses(tmp_path):
    """A discuss.vllm.ai topic is its number: its slug may change and a reply's address adds a post number."""
    problems = _duplicates_among(
        tmp_path,
        (
            "https://discuss.vllm.ai/t/how-to-understand-oom/2584",
            "https://discuss.vllm.ai/t/how-to-understand-oom-and-foresee-memory-usage/2584/2",
            "https://discuss.vllm.ai/t/how-to-understand-oom/2585",
        ),
    )
    assert len(problems) == 1 and problems[0].startswith("b001.json: same thread as a001.json")


def test_corpus_checker_takes_forum_pages_and_refuses_mirrors(tmp_path):
    """Q&A and forum pages are public threads; a site that copies GitHub threads is refused, so that a mirrored
    thread is cited by its GitHub address and the duplicate check sees it."""
    import json

    checker = _corpus_checker()
    for case_id, url in (
        ("a001", "https://stackoverflow.com/questions/7901/vllm-oom"),
        ("b001", "https://www.stepcodex.com/en/issue/bug-engine-crashes"),
        ("c001", "http://example.org/log"),
    ):
        (tmp_path / f"{case_id}.json").write_text(json.dumps({"id": case_id, "source_url": url}))
    problems = {case_id: checker.case_problems(tmp_path / f"{case_id}.json") for case_id in ("a001", "b001", "c001")}
    assert not any("source_url" in p for p in problems["a001"])
    assert any("mirrors a GitHub thread" in p for p in problems["b001"])
    assert any("not a public thread URL" in p for p in problems["c001"])
