"""Secrets: plant tokens and keys where users keep them, drive the `oomkit` command line against one
real vLLM CPU server, then look for each of them in every file oomkit wrote and every line it printed.

Planted:
- oomkit's environment: HF_TOKEN, OPENAI_API_KEY, OOMKIT_API_KEY;
- a launch profile's `env:` (HF_TOKEN, AWS_SECRET_ACCESS_KEY) and `args:` (vLLM `api_key`, three
  keys, so the server refuses a request without one and oomkit's own probes must send one);
- oomkit's command line (`bench --api-key`) and a URL with `user:password@` (`--url`, `--memory`);
- log lines (`Authorization: Bearer`, `--api-key`, `hf_token=`, the args line with `api_key` and
  `hf_token`, a URL with a password, Python's printed dicts and argv lists) in a copy of a real vLLM
  log that `oomkit triage` reads, laid out so that triage quotes them.

Scanned: every file under the folder the commands ran in (their runs/ is inside), read as bytes,
and the stdout and stderr of every command, for each secret, its first half (a line cut inside
it), its URL-encoded form and, for the URL password, the base64 of `user:password` (an HTTP Basic
header). A secret leaked when any form of it is found anywhere. One server start; about 40 s on
2 cores:

    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/secrets_scan.py [--json] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets as _random
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "examples" / "testbed-healthy.yaml"
REQUIREMENTS = REPO / "examples" / "requirements-testbed.yaml"
# A real vLLM CPU start-up log (its line ARGS_LINE, 0-based, is "non-default args: {...}").
REAL_LOG = REPO / "examples" / "logs" / "cpu-startup_ok_tiny.log"
ARGS_LINE = 11
MIRROR = "https://hf-mirror.example"
READY_TIMEOUT_S = 300.0
COMMAND_TIMEOUT_S = 300.0
URL_USER = "scan"
# Tiny agent sessions: enough requests to fill requests.jsonl, short enough for 2 CPU cores.
WORKLOAD = {
    "name": "secrets",
    "seed": 1,
    "sessions": 2,
    "steps": 2,
    "system_instruction_tokens": 60,
    "format_rules_tokens": 10,
    "user_task_tokens": 10,
    "workflow_metadata_tokens": 10,
    "tools": {"count": 0},
    "output_tokens": 16,
    "ignore_eos": True,
    "temperature": 0.0,
}


@dataclass(frozen=True)
class Secret:
    """One planted value. `user` is set for a URL password: its Basic header form is scanned too."""

    name: str
    value: str
    planted: str
    user: str | None = None

    def forms(self) -> dict[str, bytes]:
        """What to look for. The first half stands for the value cut short (a line cut inside a
        secret leaves a prefix no pattern recognises); `find_secrets` names a whole one `raw`."""
        out = {"first half": self.value[: len(self.value) // 2].encode()}
        quoted = quote(self.value, safe="")
        if quoted != self.value:
            out["url-encoded"] = quoted.encode()
        if self.user is not None:
            out["base64 user:password"] = base64.b64encode(f"{self.user}:{self.value}".encode())
        return out


def _token(length: int) -> str:
    return "".join(_random.choice(string.ascii_letters + string.digits) for _ in range(length))


def plant_secrets() -> dict[str, Secret]:
    """Fresh values each run. Several have no shape a pattern knows (no hf_/sk- prefix): only the
    context they appear in can tell oomkit that they are secrets."""
    planted = (
        Secret("env HF_TOKEN", "hf_" + _token(34), "oomkit's environment"),
        Secret("env OPENAI_API_KEY", "sk-" + _token(40), "oomkit's environment"),
        Secret("env OOMKIT_API_KEY", "envkey" + _token(26), "oomkit's environment; the server's third api key"),
        Secret("profile api_key", "profkey" + _token(25), "profile args.api_key[0] (oomkit's launch probes send it)"),
        Secret("--api-key", "clikey" + _token(26), "oomkit bench --api-key; profile args.api_key[1]"),
        Secret("profile HF_TOKEN", "hf_" + _token(34), "profile env"),
        Secret("profile AWS_SECRET_ACCESS_KEY", _token(40), "profile env"),
        Secret(
            "URL password",
            "pw" + _token(22) + "!$",
            f"--url, --memory http://{URL_USER}:<password>@...; a log line's URL",
            user=URL_USER,
        ),
        Secret(
            "log bearer token", "eyJ" + _token(32), "log lines: Authorization: Bearer, {'Authorization': 'Bearer ..'}"
        ),
        Secret("log --api-key", "logkey" + _token(26), "log lines: --api-key, args 'api_key': [...], argv list"),
        Secret("log args api_key", "argkey" + _token(26), "log line: args 'api_key': [..., <second key>]"),
        Secret("log hf_token", "hf_" + _token(34), "log lines: hf_token=, args 'hf_token', argv list"),
    )
    return {s.name: s for s in planted}


# --- the scan -------------------------------------------------------------------------------------
def find_secrets(data: bytes, place: str, planted: list[Secret]) -> list[dict[str, Any]]:
    """Every occurrence of every form of every secret in `data`, with its 1-based line."""
    out = []
    for secret in planted:
        whole = secret.value.encode()
        for form, needle in secret.forms().items():
            at = data.find(needle)
            while at >= 0:
                kind = "raw" if form == "first half" and data.startswith(whole, at) else form
                out.append({"secret": secret.name, "form": kind, "place": place, "line": data.count(b"\n", 0, at) + 1})
                at = data.find(needle, at + len(needle))
    return out


def scan(root: Path, outputs: dict[str, str], planted: list[Secret]) -> dict[str, Any]:
    """Each file under `root` (bytes, whatever its type) and each captured output stream."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    leaks = [leak for p in files for leak in find_secrets(p.read_bytes(), str(p), planted)]
    leaks += [
        leak
        for place, text in outputs.items()
        for leak in find_secrets(text.encode("utf-8", errors="surrogateescape"), place, planted)
    ]
    return {"files": [str(p.relative_to(root)) for p in files], "streams": sorted(outputs), "leaks": leaks}


# --- running oomkit -------------------------------------------------------------------------------
@dataclass
class Session:
    """Runs `python -m oomkit` in `cwd` with the planted environment; keeps every output stream
    under a label that holds no secret (the command lines do)."""

    cwd: Path
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "oomkit", *args]

    def keep(self, label: str, rc: int | None, stdout: str, stderr: str, wall_s: float) -> None:
        self.outputs[f"stdout of oomkit {label}"] = stdout
        self.outputs[f"stderr of oomkit {label}"] = stderr
        self.commands.append({"command": f"oomkit {label}", "rc": rc, "wall_s": round(wall_s, 1)})

    def run(self, label: str, *args: str) -> subprocess.CompletedProcess[str]:
        began = time.monotonic()
        done = subprocess.run(
            self.argv(*args),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            errors="surrogateescape",
        )
        self.keep(label, done.returncode, done.stdout, done.stderr, time.monotonic() - began)
        return done


@contextlib.contextmanager
def serving(session: Session, profile: Path, runs: Path) -> Iterator[dict[str, Any]]:
    """The foreground `oomkit launch PROFILE` until its manifest says ready; stopped on the way
    out by `oomkit launch --stop RUN`, as a user would (run twice if its owner had to be killed:
    the second one kills the server's group)."""
    began = time.monotonic()
    proc = subprocess.Popen(
        session.argv("launch", str(profile), "--runs-dir", str(runs)),
        cwd=session.cwd,
        env=session.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",
        start_new_session=True,
    )
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate(), strict=False)))
    reader.start()
    run_dir: list[Path] = []
    try:
        launch = _wait_ready(proc, runs, run_dir)
        yield launch
    finally:
        if run_dir:
            session.run("launch --stop RUN", "launch", "--stop", str(run_dir[0]), "--runs-dir", str(runs), "--json")
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            if run_dir:
                session.run(
                    "launch --stop RUN (owner gone)", "launch", "--stop", str(run_dir[0]), "--runs-dir", str(runs)
                )
        reader.join()
        session.keep(
            "launch PROFILE", proc.returncode, out.get("stdout", ""), out.get("stderr", ""), time.monotonic() - began
        )


def _wait_ready(proc: subprocess.Popen[str], runs: Path, run_dir: list[Path]) -> dict[str, Any]:
    """The launch's manifest once it has a base_url; `run_dir` gets the folder as soon as it exists."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        for path in runs.glob("*/manifest.json"):
            run_dir[:] = [path.parent]
            with contextlib.suppress(OSError, ValueError):
                manifest = json.loads(path.read_text(encoding="utf-8"))
                if manifest.get("ready_at") and manifest.get("base_url"):
                    return {**manifest, "run_dir": path.parent}
        time.sleep(0.5)
    raise RuntimeError(f"the launched server was not ready (oomkit exit {proc.poll()}); see {runs}")


# --- the inputs -----------------------------------------------------------------------------------
def write_inputs(inputs: Path, s: dict[str, Secret]) -> dict[str, Path]:
    inputs.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    data["label"] = "secrets"
    data["args"]["api_key"] = [s["profile api_key"].value, s["--api-key"].value, s["env OOMKIT_API_KEY"].value]
    data["env"].update(
        {"HF_TOKEN": s["profile HF_TOKEN"].value, "AWS_SECRET_ACCESS_KEY": s["profile AWS_SECRET_ACCESS_KEY"].value}
    )
    paths = {"profile": inputs / "profile.yaml", "workload": inputs / "workload.yaml", "log": inputs / "vllm.log"}
    paths["profile"].write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    paths["workload"].write_text(yaml.safe_dump(WORKLOAD, sort_keys=False), encoding="utf-8")
    paths["log"].write_text(planted_log(s), encoding="utf-8")
    return paths


def planted_log(s: dict[str, Secret]) -> str:
    """A real vLLM start-up log, with secrets in the lines triage quotes: the args line (as vLLM
    before 0.11 printed it, keys in the clear) and a start that fails on a 401 from a model mirror,
    whose exceptions quote a URL with a password, a header and an argv. The error line is laid out
    so that triage's 100-column evidence line ends inside the URL password."""
    lines = REAL_LOG.read_text(encoding="utf-8").splitlines()[: ARGS_LINE + 8]
    bearer, key, hf, pw = (s[n].value for n in ("log bearer token", "log --api-key", "log hf_token", "URL password"))
    args_key = s["log args api_key"].value
    lines[ARGS_LINE] = lines[ARGS_LINE].rstrip("}") + f", 'api_key': ['{key}', '{args_key}'], 'hf_token': '{hf}'}}"
    err = "(APIServer pid=21447) ERROR 12-02 15:42:27 [api_server.py:1] "
    shell = [
        f"+ exec python -m vllm.entrypoints.openai.api_server --api-key {key} --port 8101",
        f"+ export hf_token={hf}",
        f"+ curl -sf -H 'Authorization: Bearer {bearer}' {MIRROR}/api/models/tiny",
    ]
    failure = [
        err + "Traceback (most recent call last):",
        err + '  File "<venv>/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py", line 75, in main',
        err + "subprocess.CalledProcessError: Command '['huggingface-cli', 'download', 'tiny', '--token', "
        f"'{hf}', '--api-key', '{key}']' returned non-zero exit status 1.",
        err + "",
        err + "During handling of the above exception, another exception occurred:",
        err + "Traceback (most recent call last):",
        err + '  File "<venv>/lib/python3.11/site-packages/urllib/request.py", line 643, in http_error_default',
        # urllib.error.HTTPError (22 characters) puts the password at columns 77-103 of the message.
        err + f"urllib.error.HTTPError: 401 Client Error: Unauthorized for url: https://{URL_USER}:{quote(pw, safe='')}"
        f"@{MIRROR.split('://')[1]}/api/models/tiny (request headers: {{'Authorization': 'Bearer {bearer}'}})",
    ]
    return "\n".join(shell + lines + failure) + "\n"


# --- the scenario ---------------------------------------------------------------------------------
def _http_status(url: str, key: str | None) -> int | None:
    import httpx

    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.get(url + "/v1/models", headers=headers, timeout=10, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def _server_env(launch: dict[str, Any]) -> dict[str, str]:
    """The environment the server process really got (from /proc): proof the env was planted."""
    import psutil

    try:
        return psutil.Process(int((launch.get("server") or {}).get("pid"))).environ()
    except (psutil.Error, TypeError, ValueError):
        return {}


def _bench_ok(done: subprocess.CompletedProcess[str]) -> int:
    try:
        return int(json.loads(done.stdout)["client"]["ok"])
    except (ValueError, KeyError, TypeError):
        return 0


def _load(session: Session, s: dict[str, Secret], paths: dict[str, Path], runs: Path, checks: dict[str, Any]) -> None:
    """While the server runs: each way a key reaches the client, and a URL with a password."""
    with serving(session, paths["profile"], runs) as launch:
        base = launch["base_url"]
        checks["launch_run"] = launch["run_dir"].name
        checks["no_key_status"] = _http_status(base, None)
        checks["profile_key_status"] = _http_status(base, s["profile api_key"].value)
        env = _server_env(launch)
        checks["server_env"] = sorted(
            n
            for n, secret in (
                ("HF_TOKEN", "profile HF_TOKEN"),
                ("AWS_SECRET_ACCESS_KEY", "profile AWS_SECRET_ACCESS_KEY"),
                ("OPENAI_API_KEY", "env OPENAI_API_KEY"),
                ("OOMKIT_API_KEY", "env OOMKIT_API_KEY"),
            )
            if env.get(n) == s[secret].value
        )
        creds = base.replace("://", f"://{URL_USER}:{quote(s['URL password'].value, safe='')}@", 1)
        done = session.run(
            "bench --url --api-key KEY --memory URL",
            "bench",
            "--url",
            base,
            "--api-key",
            s["--api-key"].value,
            "--memory",
            creds + "/metrics",
            "--workload",
            str(paths["workload"]),
            "--concurrency",
            "2",
            "--json",
            "--runs-dir",
            str(runs),
            "--label",
            "secrets-cli-key",
        )
        checks["cli_key_requests_ok"] = _bench_ok(done)
        done = session.run(
            "bench --url (key from $OOMKIT_API_KEY)",
            "bench",
            "--url",
            base,
            "--workload",
            str(paths["workload"]),
            "--concurrency",
            "1",
            "--sessions",
            "1",
            "--memory",
            "none",
            "--json",
            "--runs-dir",
            str(runs),
            "--label",
            "secrets-env-key",
        )
        checks["env_key_requests_ok"] = _bench_ok(done)
        # httpx turns user:password@ into a Basic header, which replaces the Bearer one: vLLM refuses it.
        done = session.run(
            "bench --url user:password@",
            "bench",
            "--url",
            creds,
            "--workload",
            str(paths["workload"]),
            "--concurrency",
            "1",
            "--sessions",
            "1",
            "--memory",
            "none",
            "--runs-dir",
            str(runs),
            "--label",
            "secrets-url-password",
        )
        checks["url_password_bench_rc"] = done.returncode
        session.run("runs --json --all", "runs", "--runs-dir", str(runs), "--json", "--all")
    log = (launch["run_dir"] / "server.log").read_text(encoding="utf-8", errors="replace")
    checks["server_log_has_args_line"] = "non-default args:" in log and "'api_key'" in log


def _afterwards(session: Session, paths: dict[str, Path], runs: Path, checks: dict[str, Any]) -> None:
    """What reads the run folders back: decide, the reports, runs; and env and triage."""
    launch = runs / checks["launch_run"]
    checks["launch_state"] = json.loads((launch / "manifest.json").read_text(encoding="utf-8")).get("state")
    bench = next((p.parent for p in runs.glob("*secrets-cli-key*/bench.json")), None)
    done = session.run(
        "decide --json",
        "decide",
        str(launch),
        *([str(bench)] if bench else []),
        "--requirements",
        str(REQUIREMENTS),
        "--runs-dir",
        str(runs),
        "--json",
    )
    decision = _decision_folder(done.stdout, runs)
    checks["decision"] = decision.name if decision else None
    for target, name in ((decision, "decision"), (bench, "bench run"), (launch, "launch run")):
        for fmt in ("html", "md", "json"):
            if target is not None:
                session.run(
                    f"report {name} --format {fmt}", "report", str(target), "--format", fmt, "--runs-dir", str(runs)
                )
    session.run("runs", "runs", "--runs-dir", str(runs), "--all")
    session.run("env --json", "env", "--json")
    session.run("env", "env")
    done = session.run("triage LOG --json", "triage", str(paths["log"]), "--json")
    checks["triage_quotes_masked_bearer"] = "Bearer ***" in done.stdout
    checks["triage_quotes_masked_api_key"] = "'api_key': ['***', '***']" in done.stdout
    session.run("triage LOG", "triage", str(paths["log"]))


def _decision_folder(stdout: str, runs: Path) -> Path | None:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        folder = Path(json.loads(stdout)["run_dir"])
        if folder.is_dir():
            return folder
    return next((p.parent for p in runs.glob("*/decision.json")), None)


def run_secrets(workdir: Path) -> dict[str, Any]:
    """Plant, run, scan; the figures robustness.py reports (`secrets_leaked` counts distinct secrets)."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    s = plant_secrets()
    paths = write_inputs(workdir / "inputs", s)
    cwd = workdir / "oomkit"  # everything oomkit writes lands here: runs/ and anything relative to its cwd
    runs = cwd / "runs"
    runs.mkdir(parents=True)
    env = {
        **os.environ,
        "HF_TOKEN": s["env HF_TOKEN"].value,
        "OPENAI_API_KEY": s["env OPENAI_API_KEY"].value,
        "OOMKIT_API_KEY": s["env OOMKIT_API_KEY"].value,
        "PYTHONPATH": str(REPO / "src"),
    }
    session = Session(cwd, env)
    checks: dict[str, Any] = {}
    try:
        _load(session, s, paths, runs, checks)
        _afterwards(session, paths, runs, checks)
    finally:
        found = scan(cwd, session.outputs, list(s.values()))
    leaked = sorted({leak["secret"] for leak in found["leaks"]})
    return {
        "secrets_planted": len(s),
        "places_scanned": len(found["files"]) + len(found["streams"]),
        "files_scanned": len(found["files"]),
        "streams_scanned": len(found["streams"]),
        "secrets_leaked": len(leaked),
        "leaked": leaked,
        "leaks": found["leaks"],
        "planted": {name: sec.planted for name, sec in s.items()},
        "checks": checks,
        "files": found["files"],
        "commands": session.commands,
        "wall_s": round(time.monotonic() - began, 1),
    }


def render(result: dict[str, Any]) -> str:
    lines = [f"{'secret':<32} {'leaks':>5}  planted in"]
    for name, where in result["planted"].items():
        count = sum(1 for leak in result["leaks"] if leak["secret"] == name)
        lines.append(f"{name:<32} {count:>5}  {where}")
    lines += [f"  LEAK {leak['secret']} ({leak['form']}) in {leak['place']}:{leak['line']}" for leak in result["leaks"]]
    lines.append(
        f"secrets planted {result['secrets_planted']}, places scanned {result['places_scanned']} "
        f"({result['files_scanned']} files, {result['streams_scanned']} output streams of "
        f"{len(result['commands'])} commands), secrets leaked {result['secrets_leaked']}, "
        f"{result['wall_s']:.0f} s"
    )
    lines.append("checks: " + ", ".join(f"{k}={v}" for k, v in result["checks"].items()))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workdir", type=Path, help="keep the inputs and run folders here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oomkit-secrets-") as tmp:
        result = run_secrets(args.workdir or Path(tmp))
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 1 if result["secrets_leaked"] else 0


if __name__ == "__main__":
    sys.exit(main())
