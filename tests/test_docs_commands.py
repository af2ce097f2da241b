"""Every command in README.md and docs/*.md is accounted for, and the ones that work from files run
as written (placeholders such as `server.log` replaced by a real file of the same kind), so a
documented command cannot rot.

Commands come from ```bash blocks and from `$ ` lines in other blocks. Each must match exactly one
row of HOW: `run` (run here and must exit with the code given), `server` (needs a vLLM server; run
by the server test named), or `outside` (not oomkit's to run in a test: installs, other tools, the
suite itself), with the reason. A new documented command with no row fails the first test."""

from __future__ import annotations

import glob
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OOMKIT_SHARED", REPO.parent / "shared"))
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Command:
    doc: str
    text: str


def documented() -> list[Command]:
    found = []
    for doc in DOCS:
        for lang, body in FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in _joined(body.split("\n")):
                line = line.strip()
                if lang in ("bash", "sh", "shell") and line and not line.startswith("#"):
                    found.append(Command(doc.name, _uncommented(line)))
                elif line.startswith("$ "):
                    found.append(Command(doc.name, _uncommented(line[2:])))
    return found


def _uncommented(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def _joined(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
        else:
            out.append(line.rstrip())
    return out


# (pattern on the command, how, detail): for `run` the detail is the expected exit code.
HOW: list[tuple[str, str, str]] = [
    # docs/env.md: 8x B200 cannot hold Kimi K3's weights, so the recipe check fails: exit 1 (documented).
    (r"^oomkit env --from tests/fixtures/env/b200-8x-r580 --recipe \S+$", "run", "1"),
    (r"^oomkit (triage|plan|runs)\b", "run", "0"),
    (r"^oomkit env($| --from tests/fixtures/env/b200-8x-r580 .* --print-command$)", "run", "0"),
    (r"^\.venv/bin/oomkit env\b", "run", "0"),
    (r"^kubectl logs \S+ \| oomkit triage -$", "run", "0"),
    (r"^oomkit (decide|report) ", "run", "0"),
    (r"^\.venv/bin/python scripts/gen_vllm_knowledge\.py --check-installed$", "run", "0"),
    (r"^oomkit launch examples/testbed-(healthy|kv-too-small)\.yaml --check$", "server", "tests/test_launch_server.py"),
    (r"^oomkit forecast ", "run", "0"),
    (
        r"^oomkit ladder --profile examples/testbed-small-kv\.yaml$",
        "server",
        "tests/test_fit_server.py (fit or refusal)",
    ),
    (r"^oomkit investigate ", "server", "tests/test_investigate_server.py (the same profile, repeats 1)"),
    (r"^oomkit compare ", "server", "tests/test_compare_server.py and tests/test_faults_server.py"),
    (r"^oomkit bench --url http://127\.0\.0\.1", "server", "tests/test_bench_clients.py (--clients on the testbed)"),
    (
        r"^oomkit bench --url http://HEAD",
        "outside",
        "needs a Ray cluster; tests/test_scaleout_clients.py runs a local one",
    ),
    (r"^scripts/dev\.sh (demo|test)$", "outside", "CI runs scripts/dev.sh test; the demo is the README's main job"),
    (r"^pip install ", "outside", "an install"),
    (r"^(mkdir|nvidia-smi|pip list|env >|lscpu|cat /proc|ulimit|grep -H)", "outside", "capture on a GPU node"),
    (r"^\.venv/bin/python -m pytest |^flock ", "outside", "the test suite itself"),
    (r"^\.venv/bin/python tests/fixtures/env/construct\.py$", "outside", "regenerates committed fixtures"),
    (r"^\.venv/bin/python scripts/gen_vllm_knowledge\.py$", "outside", "downloads ~29 vLLM wheels (~10 min)"),
    (r"^\.venv/bin/python benchmarks/", "outside", "a benchmark (minutes); its figures are in the docs"),
    (r"^OOMKIT_RAY_LINK=0 \.venv/bin/python benchmarks/", "outside", "a benchmark on Ray's fallback path"),
]

# Placeholders in documented commands -> a real file of the same kind.
PLACEHOLDERS = {
    "server.log": "examples/logs/cpu-kv_override_too_small.log",
    "logs/": "tests/fixtures/cpu-logs/",
    "shared/fixtures/": f"{SHARED}/fixtures/",
    "../shared/": f"{SHARED}/",
    "runs/<ladder run>": "tests/fixtures/decide/ladder-small-kv",
    "runs/<compare folder>": "{compare}",
    "runs/<decision folder>": "{decision}",
    "runs/<run folder>": "tests/fixtures/decide/ladder-small-kv",
    "R.yaml": "examples/requirements-testbed.yaml",
    "vllm-bench-c2.json": "tests/fixtures/decide/imports/vllm-bench-c2.json",
    "vllm-bench-c4.json": "tests/fixtures/decide/imports/vllm-bench-c4.json",
    "-o r.md": "-o {tmp}/r.md",
}


def how(command: Command) -> list[tuple[str, str, str]]:
    return [row for row in HOW if re.search(row[0], command.text)]


def test_every_documented_command_is_accounted_for():
    commands = documented()
    assert len(commands) > 30
    unclassified = [f"{c.doc}: {c.text}" for c in commands if len(how(c)) != 1]
    assert unclassified == [], "add a row to HOW for: " + "; ".join(unclassified)


RUNNABLE = [c for c in documented() if len(how(c)) == 1 and how(c)[0][1] == "run"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A decision folder and a compare folder made from the committed real run folders."""
    tmp = tmp_path_factory.mktemp("docs-commands")
    compare = tmp / "compare"
    shutil.copytree(REPO / "tests/fixtures/decide/investigation-small-kv/compare", compare)
    decision = tmp / "decision"
    out = _oomkit(
        ["decide", "tests/fixtures/decide/ladder-small-kv", "--requirements", "examples/requirements-testbed.yaml"],
        env_runs=decision,
    )
    made = sorted(p for p in decision.glob("*") if p.is_dir())
    assert out.returncode in (0, 1) and made, out.stderr
    return {"tmp": str(tmp), "compare": str(compare), "decision": str(made[-1])}


def _oomkit(args: list[str], env_runs: Path | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "oomkit", *args]
    if env_runs is not None and args and args[0] in ("decide", "report", "runs"):
        cmd += ["--runs-dir", str(env_runs)]
    return subprocess.run(cmd, cwd=REPO, input=stdin, capture_output=True, timeout=300, check=False)


def concrete(text: str, folders: dict[str, str]) -> str:
    """The command with its placeholders replaced: phrases first, then whole words and path prefixes."""
    text = re.sub(r"\s\[[^\]]*\]", "", text)  # optional parts written as [--flag X]
    for placeholder, real in PLACEHOLDERS.items():
        if "<" in placeholder or " " in placeholder:
            text = text.replace(placeholder, real.format(**folders))
    text = text.replace("node0.log.gz node1.log.gz", "{tmp}/node0.log.gz {tmp}/node1.log.gz").format(**folders)
    return " ".join(_word(word, folders) for word in text.split(" "))


def _word(word: str, folders: dict[str, str]) -> str:
    for placeholder, real in PLACEHOLDERS.items():
        if word == placeholder or (placeholder.endswith("/") and word.startswith(placeholder) and word != placeholder):
            return real.format(**folders) + word[len(placeholder) :]
    return word


@pytest.mark.parametrize("command", RUNNABLE, ids=[f"{c.doc}:{c.text[:60]}" for c in RUNNABLE])
def test_documented_command_runs_as_written(command, folders):
    code = int(how(command)[0][2])
    text = concrete(command.text, folders)
    _gz_ranks(Path(folders["tmp"]))
    stdin = None
    if text.startswith("kubectl logs"):  # kubectl is not here: the same bytes on stdin
        stdin = (REPO / PLACEHOLDERS["server.log"]).read_bytes()
        text = text.split("| ", 1)[1]
    args = [hit for arg in shlex.split(text) for hit in (sorted(glob.glob(str(REPO / arg))) if "*" in arg else [arg])]
    if args[0] in (".venv/bin/oomkit", "oomkit"):
        args = args[1:]
        if args and args[0] in ("runs", "decide"):  # never write into the repository's ./runs
            args += ["--runs-dir", folders["tmp"]]
        out = _oomkit(args, stdin=stdin)
    else:
        out = subprocess.run([sys.executable, *args[1:]], cwd=REPO, capture_output=True, timeout=300, check=False)
    assert out.returncode == code, f"{command.doc}: {text}\n{out.stdout[-2000:]!r}\n{out.stderr[-2000:]!r}"
    assert b"Traceback" not in out.stderr


def _gz_ranks(tmp: Path) -> None:
    for i, name in enumerate(("node0.log.gz", "node1.log.gz")):
        target = tmp / name
        if not target.exists():
            source = sorted((REPO / "tests/fixtures/cpu-logs").glob("*.log"))[i]
            target.write_bytes(gzip.compress(source.read_bytes()))
