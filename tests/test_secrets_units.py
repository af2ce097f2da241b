"""The secrets scan without a server: the scanner finds what it must (so the server test cannot pass
by looking in the wrong way), and each leak the scan found once stays fixed:
- vLLM's api_key is a list: every key, in the manifest's profile and command, and in a log line;
- an Authorization header and an argv printed by Python (dict and list reprs);
- a line cut inside a secret (triage's evidence and summary) before it was redacted;
- a profile with api_key: oomkit's own ready probe and check request must send a key."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from oomkit.launch import check_profile, parse_profile
from oomkit.redact import MASK, redact, redact_args
from oomkit.rundir import RunDir
from oomkit.triage import analyse
from oomkit.triage.render import render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import secrets_scan  # noqa: E402

KEYS = ["firstkeyQ8d7Hs2LmPq0Xz", "secondkeyR4n1Vb7TcW3Jy"]


# --- the scanner --------------------------------------------------------------------------------
def test_scanner_finds_every_form_with_its_line() -> None:
    pw = secrets_scan.Secret("pw", "pwAbCdEfGhIjKlMn0123!$", "url", user="scan")
    key = secrets_scan.Secret("key", "keyZyXwVuTsRqPoN9876", "args")
    data = (
        b"line one\n"
        + b"url http://scan:pwAbCdEfGhIjKlMn0123%21%24@host\n"
        + b"Basic "
        + base64.b64encode(b"scan:pwAbCdEfGhIjKlMn0123!$")
        + b"\n"
        + b"cut keyZyXwVuTs...\n"
        + b"whole keyZyXwVuTsRqPoN9876 and pwAbCdEfGhIjKlMn0123!$\n"
    )
    found = {(f["secret"], f["form"], f["line"]) for f in secrets_scan.find_secrets(data, "x", [pw, key])}
    assert found == {
        ("pw", "url-encoded", 2),
        ("pw", "first half", 2),
        ("pw", "base64 user:password", 3),
        ("key", "first half", 4),
        ("key", "raw", 5),
        ("pw", "raw", 5),
    }


def test_scan_reports_a_leak_when_redaction_is_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the server test relies on: a secret in a written file is found, with its file and line."""
    planted = secrets_scan.plant_secrets()
    key = planted["profile api_key"].value
    RunDir.create(tmp_path / "clean", "clean").update(profile={"args": {"api_key": [key]}})
    assert secrets_scan.scan(tmp_path / "clean", {}, list(planted.values()))["leaks"] == []

    monkeypatch.setattr("oomkit.rundir.redact_obj", lambda obj: obj)  # redaction broken
    RunDir.create(tmp_path / "leaky", "leaky").update(profile={"args": {"api_key": [key]}})
    output = {"stdout of oomkit x": f"Bearer {key}"}
    leaks = secrets_scan.scan(tmp_path / "leaky", output, list(planted.values()))["leaks"]
    places = {(leak["secret"], Path(leak["place"]).name, leak["form"]) for leak in leaks}
    assert places == {("profile api_key", "manifest.json", "raw"), ("profile api_key", "stdout of oomkit x", "raw")}
    assert all(isinstance(leak["line"], int) and leak["line"] > 1 for leak in leaks if leak["place"].endswith(".json"))


def test_planted_log_puts_each_log_secret_where_triage_quotes_it() -> None:
    planted = secrets_scan.plant_secrets()
    log = secrets_scan.planted_log(planted)
    for name in ("log bearer token", "log --api-key", "log args api_key", "log hf_token"):
        assert planted[name].value in log, name


# --- redact: the forms the scan found leaking ---------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "non-default args: {'host': '127.0.0.1', 'api_key': ['firstkeyQ8d7Hs2LmPq0Xz', 'secondkeyR4n1Vb7TcW3Jy']}",
        '{\n  "api_key": [\n    "firstkeyQ8d7Hs2LmPq0Xz",\n    "secondkeyR4n1Vb7TcW3Jy"\n  ]\n}',
        "request headers: {'host': 'h', 'Authorization': 'Bearer firstkeyQ8d7Hs2LmPq0Xz'}",
        "Command '['vllm', 'serve', 'm', '--api-key', 'firstkeyQ8d7Hs2LmPq0Xz']' returned non-zero exit status 1.",
    ],
)
def test_secret_forms_python_prints_are_masked(text: str) -> None:
    out = redact(text)
    assert KEYS[0] not in out and KEYS[1] not in out and MASK in out, out
    assert redact(out) == out  # idempotent: masking twice does not mangle the line


def test_list_under_secret_name_keeps_its_shape_and_other_lists_are_left_alone() -> None:
    assert redact("'api_key': ['a1b2c3', 'd4e5f6'], 'sizes': [1, 2]") == "'api_key': ['***', '***'], 'sizes': [1, 2]"
    assert redact("'api_key': []") == "'api_key': []"


def test_redact_args_masks_every_value_of_a_secret_flag() -> None:
    argv = ["python", "--api-key", *KEYS, "--port", "8000", "--hf-token", "-odd", "--token=abc"]
    assert redact_args(argv) == ["python", "--api-key", MASK, MASK, "--port", "8000", "--hf-token", MASK, "--token=***"]


def test_manifest_masks_each_key_of_a_list(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "keys")
    run.update(profile={"args": {"api_key": KEYS, "max_model_len": 1024}, "env": {"VLLM_API_KEY": KEYS[0]}})
    text = (run.path / "manifest.json").read_text()
    assert KEYS[0] not in text and KEYS[1] not in text
    profile = json.loads(text)["profile"]
    assert (
        profile["args"] == {"api_key": [MASK, MASK], "max_model_len": 1024} and profile["env"]["VLLM_API_KEY"] == MASK
    )


# --- triage: redact, then cut --------------------------------------------------------------------------
def test_triage_cut_inside_a_url_password_keeps_no_prefix(tmp_path: Path) -> None:
    pw = "pw" + "Hq3Zk9LmW2xR7tYb4NcV6s"
    err = "(APIServer pid=1) ERROR 12-02 15:42:27 [api_server.py:1] "
    # 22 + 55 characters before the password: the 100-column evidence line ends inside it.
    line = f"urllib.error.HTTPError: 401 Client Error: Unauthorized for url: https://scan:{pw}@mirror.example/x"
    log = tmp_path / "vllm.log"
    log.write_text(f"{err}Traceback (most recent call last):\n{err}{line}\n")
    result = analyse([str(log)])
    text = render(result)
    assert pw[:8] not in text and pw[:8] not in json.dumps(result.to_dict())
    assert "scan:***@" in text


# --- launch: oomkit's own requests carry the profile's key ---------------------------------------------
AUTH_VLLM = textwrap.dedent(r"""
    import http.server, json, sys
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1]); model = argv[argv.index("--model") + 1]
    at = argv.index("--api-key") + 1
    keys = []
    while at < len(argv) and not argv[at].startswith("--"):
        keys.append(argv[at]); at += 1
    # Older vLLM printed its keys in the clear; server.log must not keep them.
    print("(APIServer pid=1) INFO 12-02 16:30:47 [api_utils.py:286] non-default args: {'api_key': %r}" % keys, flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code); self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
        def _refused(self):
            ok = not self.path.startswith("/v1") or self.headers.get("Authorization") in ["Bearer " + k for k in keys]
            if not ok:
                self._send(401, {"error": "Unauthorized"})
            return not ok
        def do_GET(self):
            if not self._refused():
                self._send(200, {"data": [{"id": model}]} if self.path == "/v1/models" else {})
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            if not self._refused():
                self._send(200, {"choices": [{"text": " a b"}], "usage": {"completion_tokens": 2}})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    print("INFO:     Application startup complete.", flush=True)
    httpd.serve_forever()
""")


def test_launch_check_with_api_keys_sends_one_and_records_none(tmp_path: Path) -> None:
    script = tmp_path / "auth_vllm.py"
    script.write_text(AUTH_VLLM)
    profile = parse_profile(
        yaml.safe_dump(
            {
                "model": "tiny",
                "label": "auth",
                "port": "auto",
                "start_timeout_s": 15,
                "stop_timeout_s": 2,
                "start": {"command": [sys.executable, str(script)]},
                "args": {"api_key": KEYS},
            }
        )
    )
    assert profile.api_key() == KEYS[0]
    checked = check_profile(profile, runs_dir=tmp_path / "runs")
    assert checked.launch.ready and checked.request and checked.request.ok, checked.to_dict()
    for file in checked.launch.run_dir.iterdir():
        text = file.read_text(errors="replace")
        assert KEYS[0] not in text and KEYS[1] not in text, file.name
    assert "'api_key': ['***', '***']" in (checked.launch.run_dir / "server.log").read_text()


def test_profile_api_key_falls_back_to_the_servers_vllm_api_key() -> None:
    profile = parse_profile(yaml.safe_dump({"model": "m", "env": {"VLLM_API_KEY": "envkey123"}}))
    assert profile.api_key() == "envkey123"
    assert parse_profile(yaml.safe_dump({"model": "m", "args": {"api_key": "one"}})).api_key() == "one"
