"""`oomkit triage` as a user runs it: stable JSON keys, exit codes, one-line errors, redaction."""

import json
import subprocess
import sys

import pytest
from conftest import EXCERPTS

OOMKIT = [sys.executable, "-m", "oomkit"]


def run(*args, stdin=None):
    return subprocess.run([*OOMKIT, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_json_has_the_stable_keys():
    out = run("triage", str(EXCERPTS / "v1_0.11_kv_too_small.log"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # exactly one object
    assert set(doc) >= {"oomkit_version", "inputs", "verdict", "timeline", "facts"}
    assert set(doc["verdict"]) >= {"phase", "is_oom", "confidence", "summary", "evidence", "advice"}
    assert doc["verdict"]["confidence"] in ("high", "medium", "low")
    assert all(set(e) == {"file", "line", "text"} for e in doc["verdict"]["evidence"])
    assert all(set(t) >= {"phase", "file", "line", "time"} for t in doc["timeline"])
    assert set(doc["facts"]) >= {"vllm_version", "engine", "model", "args", "figures"}
    assert set(doc["facts"]["figures"]) >= {
        "model_weights_gib",
        "available_kv_cache_gib",
        "kv_cache_tokens",
        "max_concurrency",
        "max_concurrency_tokens",
        "cuda_graph_gib",
    }
    assert doc["verdict"]["phase"] == "kv_cache_allocation"


def test_human_output_names_file_and_line():
    out = run("triage", str(EXCERPTS / "v1_0.28_load_oom.log"))
    assert out.returncode == 0
    assert "phase:      weight_loading" in out.stdout and "v1_0.28_load_oom.log:3" in out.stdout


def test_each_prints_one_json_line_per_path():
    paths = [str(EXCERPTS / n) for n in ("host_kill_137.log", "ray_nccl_dmabuf.log")]
    out = run("triage", "--each", "--json", *paths)
    lines = out.stdout.strip().splitlines()
    assert [json.loads(x)["verdict"]["phase"] for x in lines] == ["weight_loading", "network_communication"]


def test_stdin():
    out = run("triage", "-", "--json", stdin="INFO:     Application startup complete.\n")
    assert json.loads(out.stdout)["verdict"]["phase"] == "healthy"


@pytest.mark.parametrize("setup", ["missing", "empty", "binary", "dir"])
def test_bad_input_is_one_line_exit_2(tmp_path, setup):
    p = tmp_path / "x.log"
    if setup == "empty":
        p.write_text("")
    elif setup == "binary":
        p.write_bytes(bytes(range(256)) * 40)
    elif setup == "dir":
        p = tmp_path / "d"
        p.mkdir()
    out = run("triage", str(p))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("oomkit: error:")
    assert "Traceback" not in out.stderr


def test_secrets_in_log_lines_never_printed(tmp_path):
    p = tmp_path / "s.log"
    p.write_text(
        "(APIServer pid=1) INFO 12-02 10:00:00 [x.py:1] non-default args: {'api_key': 'sk-secretsecretsecret123', 'model': 'm'}\n"
        "(APIServer pid=1) ERROR 12-02 10:00:01 [x.py:2] ValueError: bad header Authorization: Bearer abcdef123456\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    for args in (["triage", str(p)], ["triage", str(p), "--json"]):
        out = run(*args)
        assert "sk-secretsecretsecret123" not in out.stdout and "abcdef123456" not in out.stdout


def test_usage_error_exit_2():
    assert run("triage").returncode == 2


def test_printed_args_that_json_has_no_form_for_do_not_break_json(tmp_path):
    # V0 prints its args as a Namespace repr: a set or bytes in it once made `--json` raise TypeError.
    log = tmp_path / "args.log"
    log.write_text(
        "INFO 04-19 17:25:10 api_server.py:150] args: Namespace(host=None, port=8001, model='/m', "
        "allowed={2, 1}, blob=b'x', shape=(1, 2))\n"
    )
    out = run("triage", str(log), "--json")
    assert out.returncode == 0, out.stderr
    args = json.loads(out.stdout)["facts"]["args"]
    assert args["allowed"] == [1, 2] and args["blob"] == "x" and args["shape"] == [1, 2]
    assert args["model"] == "/m" and args["port"] == 8001
