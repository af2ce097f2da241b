"""Launch profiles: strict schema, nearest-key suggestions, vLLM argv rendering, examples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from oomkit.errors import InputError
from oomkit.launch import Profile, load_profile, parse_profile
from oomkit.launch.profile import DEFAULT_MODULE, render_arg
from oomkit.testbed import PROFILES, render_profile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_minimal_profile_defaults() -> None:
    p = parse_profile("model: org/some-model\n")
    assert p.host == "127.0.0.1" and p.port == 8000 and p.start_timeout_s == 600
    assert p.start.argv_prefix() == [sys.executable, "-m", DEFAULT_MODULE]
    assert p.argv(8000)[3:] == ["--model", "org/some-model", "--host", "127.0.0.1", "--port", "8000"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: m\nmax_model_len: 10\n", "unknown key `max_model_len`"),
        ("model: m\nstart_timeout: 10\n", "did you mean `start_timeout_s`?"),
        ("modle: m\n", "did you mean `model`?"),
        ("model: m\nstart: {modul: x}\n", "did you mean `start.module`?"),
        ("model: m\nstart: {pyhton: /usr/bin/python3}\n", "did you mean `start.python`?"),
        ("model: m\nenvironment: {A: b}\n", "unknown key `environment`"),
        ("label: x\n", "missing key `model`"),
        ("model: m\nport: 70000\n", "outside 1-65535"),
        ("model: m\nport: any\n", "port must be a number 1-65535 or auto"),
        ("model: m\nargs: {x: [{a: 1}]}\n", "a value is a number"),
        ("model: m\nstart_timeout_s: 0\n", "`start_timeout_s`"),
        ("model: m\nargs: {model: other}\n", "set the top-level `model:` key"),
        ("model: m\nargs: {max_model_len: null}\n", "is null"),
        ("- a\n- b\n", "a YAML mapping"),
        ("model: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_profiles_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_profile(text, source="p.yaml")
    assert message in info.value.one_line()
    assert info.value.one_line().startswith("p.yaml")
    assert info.value.exit_code == 2


def test_unrelated_unknown_key_gets_no_suggestion() -> None:
    with pytest.raises(InputError) as info:
        parse_profile("model: m\nzzzzqqq: 1\n")
    assert "did you mean" not in info.value.one_line()


def test_args_accept_dashes_and_render_like_vllm_argparse() -> None:
    p = parse_profile(
        yaml.safe_dump(
            {
                "model": "m",
                "args": {
                    "max-model-len": 1024,
                    "enforce_eager": True,
                    "enable_prefix_caching": False,
                    "gpu_memory_utilization": 0.3,
                    "compilation_config": {"mode": 0},
                    "allowed_origins": ["a", "b"],
                    "prefix_cache_retention_interval": "None",
                },
            },
            sort_keys=False,
        )
    )
    assert p.arg("max_model_len") == 1024 and p.arg("max-model-len") == 1024
    argv = p.vllm_args(9000)
    assert argv[:6] == ["--model", "m", "--host", "127.0.0.1", "--port", "9000"]
    assert argv[6:] == [
        "--max-model-len",
        "1024",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization",
        "0.3",
        "--compilation-config",
        '{"mode":0}',
        "--allowed-origins",
        "a",
        "b",
        "--prefix-cache-retention-interval",
        "None",
    ]


def test_render_arg_types() -> None:
    assert render_arg("x", 0) == ["--x", "0"]
    assert render_arg("kv_cache_memory_bytes", 1 << 26) == ["--kv-cache-memory-bytes", "67108864"]


def test_args_host_and_port_override_what_vllm_gets() -> None:
    p = parse_profile("model: m\nport: 8001\nargs: {host: 0.0.0.0, port: 8000}\n")
    argv = p.vllm_args(8001)
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv.count("--port") == 1 and argv[argv.index("--port") + 1] == "8000"


def test_start_forms() -> None:
    assert parse_profile("model: m\nstart: vllm serve\n").start.argv_prefix() == ["vllm", "serve"]
    docker = "docker run --rm -p 127.0.0.1:8000:8000 vllm/vllm-openai:v0.32.0"
    assert parse_profile(f"model: m\nstart: {docker}\n").start.argv_prefix()[-1] == "vllm/vllm-openai:v0.32.0"
    p = parse_profile("model: m\nstart: {module: my.entry, python: /opt/py/bin/python}\n")
    assert p.start.argv_prefix() == ["/opt/py/bin/python", "-m", "my.entry"]
    p = parse_profile("model: m\nstart: {command: [python3, -m, vllm.entrypoints.cli.main, serve]}\n")
    assert p.start.argv_prefix() == ["python3", "-m", "vllm.entrypoints.cli.main", "serve"]


def test_env_expands_variables_and_stays_strings() -> None:
    p = parse_profile("model: m\nenv: {HF_TOKEN: '${MY_SECRET}', FLAG: true, N: 3, EMPTY: null}\n")
    env = p.server_env({"MY_SECRET": "s3", "PATH": "/bin"})
    assert env["HF_TOKEN"] == "s3" and env["FLAG"] == "1" and env["N"] == "3" and env["EMPTY"] == ""
    assert env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"
    assert p.env["HF_TOKEN"] == "${MY_SECRET}"  # the profile (and manifest) keeps the reference


def test_model_references(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("model: ./models/tiny\n")
    assert load_profile(tmp_path / "p.yaml").resolved_model() == str(tmp_path / "models" / "tiny")
    assert parse_profile("model: org/name\n").resolved_model() == "org/name"


def test_testbed_reference_resolves_to_the_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMKIT_TESTBED_DIR", str(tmp_path))
    p = parse_profile("model: testbed:qwen3next\n")
    assert p.resolved_model(create=False) == str(tmp_path / "qwen3next")
    with pytest.raises(InputError, match="unknown testbed model kind"):
        parse_profile("model: testbed:gpt5\n").resolved_model(create=False)


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such profile"):
        load_profile(tmp_path / "nope.yaml")


def test_to_dict_round_trips() -> None:
    p = parse_profile("model: m\nlabel: x\nargs: {max_model_len: 8}\n", source="a.yaml")
    again = Profile.model_validate(p.to_dict())
    assert again.to_dict() == p.to_dict() and "source" not in p.to_dict()


@pytest.mark.parametrize("entry", PROFILES, ids=lambda e: e.name)
def test_examples_are_the_rendered_testbed_profiles(entry) -> None:
    path = EXAMPLES / f"{entry.name}.yaml"
    assert path.read_text(encoding="utf-8") == render_profile(entry), "regenerate: oomkit testbed profiles examples"
    profile = load_profile(path)
    assert profile.model == f"testbed:{entry.kind}" and profile.port == "auto"
    assert "gpu_memory_utilization" in profile.args  # vLLM's default 0.92 fails on CPU
    assert profile.env["HF_HUB_OFFLINE"] == "1"


def test_examples_cover_the_scenarios_the_issue_names() -> None:
    names = {p.name for p in PROFILES}
    assert names == {
        "testbed-healthy",
        "testbed-kv-too-small",
        "testbed-budget-too-high",
        "testbed-small-kv",
        "testbed-prefix-cache",
        "testbed-hybrid",
        "testbed-hybrid-small-kv",
    }
    assert sorted(p.name for p in EXAMPLES.glob("testbed-*.yaml")) == sorted(f"{n}.yaml" for n in names)
    budget = load_profile(EXAMPLES / "testbed-budget-too-high.yaml")
    assert budget.arg("gpu_memory_utilization") == 0.99 and budget.arg("kv_cache_memory_bytes") is None
    assert load_profile(EXAMPLES / "testbed-hybrid.yaml").model == "testbed:qwen3next"
    # The demo's investigation: retention 0 so the preset compares it with dense checkpoints (None).
    demo = load_profile(EXAMPLES / "testbed-hybrid-small-kv.yaml")
    assert demo.model == "testbed:qwen3next" and demo.arg("prefix_cache_retention_interval") == 0
