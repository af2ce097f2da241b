"""`extends:` in a workload file: the base workload with this file's fields on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomkit.errors import InputError
from oomkit.workload.spec import load_workload

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_greedy_testbed_workload_differs_from_its_base_only_in_name_and_temperature() -> None:
    base = load_workload(EXAMPLES / "workload-testbed.yaml")
    greedy = load_workload(EXAMPLES / "workload-testbed-greedy.yaml")
    assert base.temperature == 1.0 and greedy.temperature == 0.0
    assert greedy.name == "testbed-agent-greedy"
    same = base.model_dump(exclude={"name", "temperature"})
    assert greedy.model_dump(exclude={"name", "temperature"}) == same


def test_nested_mappings_merge_key_by_key(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "name: b\nsessions: 2\ntools: {count: 3, schema_tokens: 40}\n", encoding="utf-8"
    )
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nname: c\ntools: {count: 1}\n", encoding="utf-8")
    child = load_workload(tmp_path / "child.yaml")
    assert (child.name, child.sessions, child.tools.count, child.tools.schema_tokens) == ("c", 2, 1, 40)


def test_a_loop_of_extends_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n", encoding="utf-8")
    with pytest.raises(InputError, match="deeper than"):
        load_workload(tmp_path / "a.yaml")


def test_a_missing_base_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: nowhere.yaml\nname: a\n", encoding="utf-8")
    with pytest.raises(InputError, match="nowhere.yaml"):
        load_workload(tmp_path / "a.yaml")
