"""`oomkit investigate` input handling without a server: what is refused before any stage runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomkit.cli import main
from oomkit.decide import load_requirements
from oomkit.errors import InputError
from oomkit.investigate import InvestigateOptions, investigate, ladder_options

REPO = Path(__file__).resolve().parent.parent
REQ = REPO / "examples" / "requirements-testbed.yaml"


def test_ladder_searches_only_up_to_the_target_with_reserve():
    opts = ladder_options(load_requirements(REQ))
    assert opts.max_concurrency == 5 and opts.slos == {"ttft_ms": 10000, "latency_ms": 30000}


def test_bad_profile_or_requirements_stop_before_any_stage(tmp_path, capsys):
    with pytest.raises(InputError, match="no such profile"):
        investigate(str(tmp_path / "none.yaml"), str(REQ), InvestigateOptions(runs_dir=str(tmp_path)))
    bad = tmp_path / "r.yaml"
    bad.write_text("name: x\nconcurrent_dialogs: 4\n")
    with pytest.raises(SystemExit) as code:
        main(
            [
                "investigate",
                str(REPO / "examples" / "testbed-small-kv.yaml"),
                "--requirements",
                str(bad),
                "--runs-dir",
                str(tmp_path),
            ]
        )
    err = capsys.readouterr().err
    assert code.value.code == 2 and "missing fields: input_tokens" in err
    assert not list(tmp_path.glob("*-investigate-*"))


def test_resume_refuses_another_profile(tmp_path):
    from oomkit.rundir import RunDir

    run = RunDir.create(tmp_path, "investigate-x", kind="investigation")
    run.update(investigation={"profile": "/elsewhere.yaml"})
    run.finish("interrupted")
    with pytest.raises(InputError, match="investigated /elsewhere.yaml"):
        investigate(
            str(REPO / "examples" / "testbed-small-kv.yaml"),
            str(REQ),
            InvestigateOptions(runs_dir=str(tmp_path), resume=str(run.path)),
        )
