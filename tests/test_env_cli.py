"""`oomkit env` through the real CLI entry point: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomkit.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "env"
K3 = Path(__file__).resolve().parent / "fixtures" / "recipes" / "moonshotai--Kimi-K3.yaml"
needs_k3 = pytest.mark.skipif(not K3.exists(), reason="shared recipes not found")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_env_on_this_machine_prints_a_table_and_json(capsys):
    code, out, err = run(capsys, "env")
    assert code == 0 and err == ""
    for label in ("driver", "GPUs", "vLLM", "torch", "CPU", "RAM", "ulimits", "RDMA"):
        assert any(line.startswith(label) for line in out.splitlines()), label
    code, out, _ = run(capsys, "env", "--json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == "oomkit.env/1" and data["source"] == "live"
    if not data["gpus"]:
        assert "no NVIDIA GPU found" in data["gpu_note"]


def test_env_from_a_capture(capsys):
    code, out, _ = run(capsys, "env", "--from", str(FIXTURES / "gb300-8x-r580"))
    assert code == 0 and "580.82.07 (CUDA 13.0" in out and "NVIDIA GB300" in out and "NV18" in out
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in out


@needs_k3
@pytest.mark.parametrize(
    "folder, code, overall", [("gb300-8x-r580", 0, "PASS"), ("h100-8x-r575", 1, "FAIL"), ("b200-8x-r580", 1, "FAIL")]
)
def test_recipe_check_exit_codes(capsys, folder, code, overall):
    got, out, err = run(capsys, "env", "--from", str(FIXTURES / folder), "--recipe", str(K3))
    assert got == code and f"overall: {overall}" in out and err == ""
    got, out, _ = run(capsys, "env", "--from", str(FIXTURES / folder), "--recipe", str(K3), "--json")
    data = json.loads(out)
    assert got == code and data["overall"] == overall.lower() and data["snapshot"]["gpus"]
    assert "constructedfixture" not in out


@needs_k3
def test_print_command(capsys):
    code, out, _ = run(
        capsys,
        "env",
        "--from",
        str(FIXTURES / "b200-8x-r580"),
        "--recipe",
        str(K3),
        "--strategy",
        "multi_node_tp_pp",
        "--print-command",
    )
    assert code == 0 and out.count("vllm serve moonshotai/Kimi-K3") == 2 and "--node-rank 1" in out
    code, out, _ = run(capsys, "env", "--recipe", str(K3), "--hardware", "gb300", "--print-command", "--json")
    assert code == 0 and json.loads(out)["nodes"][0]["argv"][:2] == ["vllm", "serve"]


@pytest.mark.parametrize(
    "argv, text",
    [
        (("env", "--strategy", "single_node_tp"), "need --recipe"),
        (("env", "--print-command"), "need --recipe"),
        (("env", "--from", "/nonexistent/capture"), "not a directory"),
        (("env", "--recipe", "/nonexistent/recipe.yaml"), "cannot read the recipe"),
        (("env", "--from", ".", "--python", "python3"), "pass only one"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, text):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and text in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@needs_k3
def test_unknown_strategy_is_exit_2_with_suggestion(capsys):
    code, _, err = run(
        capsys, "env", "--from", str(FIXTURES / "b200-8x-r580"), "--recipe", str(K3), "--strategy", "single_node_tpp"
    )
    assert code == 2 and "did you mean 'single_node_tp'" in err
