"""Faults with the real vLLM CPU server: inject each fault oomkit must survive, then count what it
kept. Every scenario drives the `oomkit` command line as a user would, in its own process; the
scenarios and what each checks are described in docs/reliability.md ("Faults with the real server").

    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/faults.py [--json] [--workdir DIR]

A scenario survived when oomkit exited with its documented code and at most one `oomkit: error:`
line, no traceback; every JSON file in its run folders parses and every JSONL line is whole (a torn
last line is allowed: `oomkit.fsio.read_jsonl` skips it); every manifest ended in a final state,
with a reason when it failed; no process of a server it started is alive afterwards; no request
was lost; and the outcome is the documented one (state, reason, verdict evidence, error class).

"Records lost" compares requests sent with lines in requests.jsonl: the fault proxy counts what it
received; where oomkit launched the server, vLLM's access log (`"POST /v1/chat/completions
HTTP/1.1" 200`) counts what reached it, and requests refused after the server exited (recorded as
`refused`, never logged) count as sent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]

from _fault_proxy import FaultProxy  # noqa: E402

from oomkit.fsio import read_jsonl  # noqa: E402
from oomkit.rundir import FINAL_STATES  # noqa: E402

PROFILE = REPO / "examples" / "testbed-healthy.yaml"
LADDER_WORKLOAD = REPO / "examples" / "workload-testbed.yaml"
# A short ladder: K=1, two history doublings, rungs c1, c2, c4, c8. The engine is killed once c1 is
# recorded; a rung takes 0.3-1 s here, so the kill lands in c2, c4 or c8: the dead rung is the first
# one not recorded, whichever it is.
LADDER_RUNGS = [1, 2, 4, 8]
LADDER = ("--agent-steps", "1", "--max-concurrency", str(LADDER_RUNGS[-1]), "--max-history-doublings", "2")
LADDER_STEPS = ["short_request", "tool_call", "agent_steps", "history_doubling", "concurrency", "repeat"]
ACCESS_LINE = re.compile(r'"POST /v1/chat/completions HTTP/1\.[01]" \d{3}')
# Each proxied chat request gets the next fault; at concurrency 1 the order is the record order.
SCHEDULE = ("pass", "http_500", "cut", "stall", "malformed", "http_503", "not_sse", "truncated", "no_done", "pass")
EXPECTED_KIND = {
    "pass": None,
    "no_done": None,
    "http_500": "http_5xx",
    "http_503": "http_5xx",
    "cut": "reset",
    "truncated": "reset",
    "malformed": "malformed_stream",
    "not_sse": "malformed_stream",
    "stall": "timeout",
}
ROWS = (
    ("API server 5xx", ("http_500", "http_503")),
    ("partial SSE", ("cut", "malformed", "not_sse", "truncated", "no_done")),
    ("stalled stream", ("stall",)),
)
STALL_TIMEOUT_S = 2.0
# Tiny agent sessions: prompts of ~100 tokens, outputs long enough to be cut mid-stream.
WORKLOAD = {
    "name": "faults",
    "seed": 1,
    "sessions": 4,
    "steps": 2,
    "system_instruction_tokens": 60,
    "format_rules_tokens": 10,
    "user_task_tokens": 10,
    "workflow_metadata_tokens": 10,
    "tools": {"count": 0},
    "output_tokens": 160,
    "ignore_eos": True,
    "temperature": 0.0,
}


@dataclass
class Outcome:
    """One scenario: what was injected, whether oomkit survived it, what it kept."""

    scenario: str
    fault: str
    injected: int = 1
    """Faults this scenario injects (the proxy rows inject several kinds); 0 for a resume."""
    survived: bool = False
    why: str = ""
    sent: int = 0
    recorded: int = 0
    unparseable: int = 0
    survivors: list[int] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.recorded)

    def judge(self, problems: list[str]) -> Outcome:
        problems = problems + [f"{self.unparseable} unparseable JSON/JSONL"] * bool(self.unparseable)
        problems += [f"processes survived: {self.survivors}"] * bool(self.survivors)
        problems += [f"{self.lost} requests not recorded"] * bool(self.lost)
        self.survived = not problems
        self.why = "; ".join(problems) or self.why
        return self

    def row(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "detail"} | {"lost": self.lost}


# --- running oomkit and watching its processes --------------------------------------------------
@dataclass
class Cli:
    rc: int | None
    stdout: str
    stderr: str
    wall_s: float
    seen: dict[int, psutil.Process]
    """Every process that ran under this oomkit (the servers it started and their children)."""
    injected: str | None = None

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def problems(self, expect_rc: int) -> list[str]:
        out = [] if self.rc == expect_rc else [f"exit {self.rc}, expected {expect_rc}"]
        errors = [line for line in self.stderr.splitlines() if line.startswith("oomkit: error:")]
        if "Traceback (most recent call last)" in self.stderr:
            out.append("a traceback on stderr")
        if len(errors) > 1:
            out.append(f"{len(errors)} error lines")
        return out


def oomkit(*args: str, inject: Callable[[psutil.Process], str | None] | None = None, timeout_s: float = 600) -> Cli:
    """Run `python -m oomkit ARGS`; every 0.1 s note its descendants and call `inject(proc)` until
    it returns what it did."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomkit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    me, seen, injected = psutil.Process(proc.pid), {}, None
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate(), strict=False)))
    reader.start()
    while proc.poll() is None and time.monotonic() - began < timeout_s:
        try:
            seen.update({p.pid: p for p in me.children(recursive=True) if p.pid not in seen})
        except psutil.Error:
            pass
        if inject and injected is None:
            injected = inject(me)
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    reader.join()
    return Cli(proc.returncode, out.get("stdout", ""), out.get("stderr", ""), time.monotonic() - began, seen, injected)


def engine_core(root: psutil.Process) -> psutil.Process | None:
    """The `VLLM::EngineCore` process under `root` (vLLM 0.32 sets that title with setproctitle,
    vllm/v1/engine/core.py `run_engine_core`)."""
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            if "EngineCore" in " ".join(child.cmdline()):  # name() is cut to 15 characters
                return child
        except psutil.Error:
            continue
    return None


def kill_engine(when: Callable[[], bool] = lambda: True) -> Callable[[psutil.Process], str | None]:
    def inject(root: psutil.Process) -> str | None:
        engine = engine_core(root) if when() else None
        if engine is None:
            return None
        try:
            title = " ".join(engine.cmdline())
            engine.kill()
        except psutil.Error:
            return None  # it went by itself between the look and the kill: look again
        return f"SIGKILL to {title} pid {engine.pid}"

    return inject


def alive(procs: dict[int, psutil.Process]) -> list[int]:
    """The pids still running (is_running compares create times: a reused pid is not ours)."""
    out = []
    for pid, proc in sorted(procs.items()):
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


# --- the run folders ------------------------------------------------------------------------------
def folder_report(runs_dir: Path) -> dict[str, Any]:
    """Every JSON file must parse; every JSONL line but a torn last one must; manifests must end."""
    bad, torn, manifests = [], [], []
    for path in sorted(runs_dir.rglob("*")):
        if path.suffix == ".json" and path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                bad.append(str(path))
                continue
            if path.name == "manifest.json":
                manifests.append(
                    {
                        "run": path.parent.name,
                        "kind": data.get("kind"),
                        "state": data.get("state"),
                        "reason": data.get("reason"),
                        "error": data.get("error"),
                    }
                )
        elif path.suffix == ".jsonl" and path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for i, line in enumerate(lines):
                try:
                    json.loads(line)
                except ValueError:
                    (torn if i == len(lines) - 1 else bad).append(f"{path}:{i + 1}")
    unfinished = [
        m for m in manifests if m["state"] not in FINAL_STATES or (m["state"] == "failed" and not m["reason"])
    ]
    return {"unparseable": bad, "torn_last_lines": torn, "manifests": manifests, "unfinished": unfinished}


def requests_in(folder: Path) -> list[dict[str, Any]]:
    return read_jsonl(folder / "requests.jsonl")


def logged_requests(server_log: Path) -> int:
    return sum(1 for line in server_log.read_text(errors="replace").splitlines() if ACCESS_LINE.search(line))


def _finish(o: Outcome, runs: Path, cli: Cli, problems: list[str]) -> Outcome:
    report = folder_report(runs)
    o.unparseable = len(report["unparseable"])
    o.survivors = alive(cli.seen)
    o.detail.update(
        rc=cli.rc, wall_s=round(cli.wall_s, 1), stderr_tail=cli.stderr[-1500:], folders=report, injected=cli.injected
    )
    problems += [f"manifest not finished: {m}" for m in report["unfinished"]]
    return o.judge(problems)


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _profile(workdir: Path, **changes: Any) -> Path:
    data = yaml.safe_load(PROFILE.read_text())
    args = {**data["args"], **changes.pop("args", {})}
    return _write(workdir / "profile.yaml", {**data, **changes, "args": args})


@contextlib.contextmanager
def _listening() -> Iterator[int]:
    """A port on 127.0.0.1 that something listens on, for as long as the block runs."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


# --- scenarios ------------------------------------------------------------------------------------
def port_taken(workdir: Path) -> Outcome:
    """Something listens on the port: the preflight refuses it in a second, nothing starts."""
    o = Outcome("port taken", "a socket listens on the profile's port")
    runs = workdir / "runs"
    with _listening() as port:
        cli = oomkit("launch", str(_profile(workdir, port=port)), "--check", "--runs-dir", str(runs))
    message = next((ln for ln in cli.stderr.splitlines() if ln.startswith("oomkit: error:")), "")
    o.detail.update(message=message, port=port, started=sorted(cli.seen))
    problems = cli.problems(2)
    problems += [] if f"port {port} on 127.0.0.1 is in use" in message else [f"unclear message {message!r}"]
    problems += [f"processes were started: {sorted(cli.seen)}"] * bool(cli.seen)
    problems += ["a run folder was created"] * (runs.exists() and any(runs.iterdir()))
    runs.mkdir(exist_ok=True)
    o.why = "refused before start, exit 2"
    return _finish(o, runs, cli, problems)


def _launch_failed(o: Outcome, runs: Path, cli: Cli, verdict_text: str) -> Outcome:
    problems = cli.problems(1)
    try:
        data = cli.json()
    except ValueError:
        return _finish(o, runs, cli, problems + ["stdout is not the JSON result"])
    o.detail.update(result=data)
    evidence = " ".join(e.get("text", "") for e in data["verdict"].get("evidence", []))
    if (data["ready"], data["state"], data["reason"]) != (False, "failed", "exited_before_ready"):
        problems.append(f"ready/state/reason {data['ready']}/{data['state']}/{data['reason']}")
    if verdict_text not in evidence:
        problems.append(f"verdict evidence lacks {verdict_text!r}: {data['verdict'].get('summary')}")
    verdict = data["verdict"]
    o.why = (
        f"failed, {data['reason']}; verdict {verdict.get('phase')} ({verdict.get('cause')}): {verdict.get('summary')}"
    )
    return _finish(o, runs, cli, problems)


def port_taken_during_start(workdir: Path) -> Outcome:
    """The port is taken when vLLM binds it (a race the preflight cannot win; here `args.port`,
    which the preflight leaves to the container or whoever maps it)."""
    o = Outcome("port taken during start", "the port is bound when vLLM binds it")
    runs = workdir / "runs"
    with _listening() as port:
        profile = _profile(workdir, args={"port": port})
        cli = oomkit("launch", str(profile), "--check", "--json", "--runs-dir", str(runs))
    return _launch_failed(o, runs, cli, "Address already in use")


def engine_killed_during_start(workdir: Path) -> Outcome:
    o = Outcome("engine killed during start", "SIGKILL to VLLM::EngineCore before ready")
    runs = workdir / "runs"
    cli = oomkit("launch", str(PROFILE), "--check", "--json", "--runs-dir", str(runs), inject=kill_engine())
    if cli.injected is None:
        return _finish(o, runs, cli, ["no EngineCore process was seen to kill"])
    # vLLM names the dead process with its exit code only when it has reaped it in time:
    # "Failed core proc(s): {'EngineCore': -9}", else "{}" (vllm/v1/engine/utils.py).
    return _launch_failed(o, runs, cli, "Engine core initialization failed")


def experiment(workdir: Path) -> Path:
    workload = _write(workdir / "workload.yaml", WORKLOAD)
    return _write(
        workdir / "experiment.yaml",
        {
            "name": "faults",
            "profile": str(PROFILE),
            "workload": str(workload),
            "concurrency": 2,
            "repeats": 2,
            "variants": [{"name": "short-output", "set": {"output_tokens": 80}}],
        },
    )


def _compare_folder(runs: Path) -> Path | None:
    return next(
        (p.parent for p in runs.glob("*/manifest.json") if json.loads(p.read_text()).get("kind") == "compare"), None
    )


def engine_killed_during_compare(workdir: Path) -> Outcome:
    """SIGKILL to the engine once the first cell is recorded: the second cell dies."""
    o = Outcome("engine killed during compare", "SIGKILL to VLLM::EngineCore during cell 2 of 4")
    runs = workdir / "runs"

    def first_cell_done() -> bool:
        return any(p.read_text().count("\n") >= 1 for p in runs.glob("*/cells.jsonl"))

    cli = oomkit("compare", str(experiment(workdir)), "--runs-dir", str(runs), inject=kill_engine(first_cell_done))
    problems = cli.problems(1)
    folder = _compare_folder(runs)
    launch = next((p.parent for p in runs.glob("*/server.log")), None)
    if cli.injected is None or folder is None or launch is None:
        return _finish(o, runs, cli, problems + ["the fault was not injected or no folders were made"])
    manifest = json.loads((folder / "manifest.json").read_text())
    cells = read_jsonl(folder / "cells.jsonl")
    records = requests_in(launch)
    answered = logged_requests(launch / "server.log")
    o.sent = answered + sum(1 for r in records if r.get("http_status") is None)
    o.recorded = len(records)
    o.detail.update(
        workdir=str(workdir),
        compare_folder=str(folder),
        launch_folder=str(launch),
        manifest=manifest,
        cells=cells,
        launch_manifest=json.loads((launch / "manifest.json").read_text()),
        records=records,
        answered=answered,
    )
    failed = [c for c in cells if c.get("failure")]
    if (manifest["state"], manifest.get("reason")) != ("failed", "baseline_server_died"):
        problems.append(f"compare state {manifest['state']}/{manifest.get('reason')}")
    if len(failed) != 1 or not failed[0]["failure"].get("evidence"):
        problems.append(f"expected one failed cell with evidence, got {failed}")
    dead = failed[0]["label"] if failed else "?"
    o.why = f"compare failed, exit 1, {len(cells) - len(failed)} cell(s) kept; dead cell {dead} recorded with evidence"
    return _finish(o, runs, cli, problems)


def resume_compare(workdir: Path, folder: Path, upstream: str) -> Outcome:
    """`oomkit compare --resume` of the folder a dead server left, on another server (through a
    pass-through proxy, which counts what is sent)."""
    o = Outcome("compare --resume after the kill", "none (continues the dead comparison)", injected=0)
    runs = workdir / "runs"
    before = len(requests_in(folder))
    with FaultProxy(upstream, ["pass"]) as proxy:
        cli = oomkit(
            "compare",
            str(experiment(workdir)),
            "--resume",
            str(folder),
            "--url",
            proxy.url,
            "--runs-dir",
            str(runs),
            "--json",
        )
        o.sent = len(proxy.log)
    o.recorded = len(requests_in(folder)) - before
    problems = cli.problems(0)
    try:
        data = cli.json()
    except ValueError:
        return _finish(o, folder.parent, cli, problems + ["stdout is not the JSON result"])
    o.detail.update(result=data)
    pairs = sorted((c["mode"], c["repeat"]) for c in data["cells"])
    if pairs != [("baseline", 1), ("baseline", 2), ("short-output", 1), ("short-output", 2)]:
        problems.append(f"cells after resume: {pairs}")
    if len(data["failed_cells"]) != 1 or "short-output" not in data["comparisons"]:
        problems.append("the failed cell or the verdicts are missing")
    o.why = f"complete: {len(pairs)} cells, the dead one run again"
    return _finish(o, folder.parent, cli, problems)


def _ladder_folder(runs: Path) -> Path | None:
    return next((p.parent for p in runs.glob("*/manifest.json") if "ladder" in json.loads(p.read_text())), None)


def listed(runs: Path) -> dict[str, dict[str, Any]]:
    """`oomkit runs --json`, by run id."""
    cli = oomkit("runs", "--runs-dir", str(runs), "--json")
    return {r["run_id"]: r for r in cli.json()} if cli.rc == 0 else {}


def _count(o: Outcome, records: list[dict[str, Any]], server_log: Path) -> int:
    """Sent: what reached vLLM (its access log) and what was refused (never logged); recorded:
    the lines in requests.jsonl. Returns the count in the access log."""
    answered = logged_requests(server_log) if server_log.is_file() else 0
    o.sent = answered + sum(1 for r in records if r.get("http_status") is None)
    o.recorded = len(records)
    return answered


def engine_killed_during_ladder(workdir: Path) -> Outcome:
    """SIGKILL to the engine once the first concurrency rung is recorded: a later rung of step 5 of 6 dies."""
    o = Outcome("engine killed during ladder", "SIGKILL to VLLM::EngineCore in a rung after c1 of step 5 of 6")
    runs = workdir / "runs"

    def first_rung_done() -> bool:
        return any(p.read_text().count("\n") >= 1 for p in runs.glob("*/rungs.jsonl"))

    cli = oomkit(
        "ladder",
        "--profile",
        str(PROFILE),
        "--workload",
        str(LADDER_WORKLOAD),
        *LADDER,
        "--runs-dir",
        str(runs),
        inject=kill_engine(first_rung_done),
    )
    problems = cli.problems(1)
    folder = _ladder_folder(runs)
    if cli.injected is None or folder is None:
        return _finish(o, runs, cli, problems + ["the fault was not injected or no folder was made"])
    manifest = json.loads((folder / "manifest.json").read_text())
    steps, rungs, records = (read_jsonl(folder / f) for f in ("steps.jsonl", "rungs.jsonl", "requests.jsonl"))
    answered = _count(o, records, folder / "server.log")
    info = listed(runs).get(folder.name, {})
    errors = [line for line in cli.stderr.splitlines() if line.startswith("oomkit: error:")]
    o.detail.update(
        workdir=str(workdir),
        folder=str(folder),
        manifest=manifest,
        steps=steps,
        rungs=rungs,
        records=records,
        answered=answered,
        listed=info,
        error_lines=errors,
    )
    if (manifest["state"], manifest.get("reason")) != ("failed", "died_after_ready") or "ladder_outcome" in manifest:
        problems.append(f"state {manifest['state']}/{manifest.get('reason')}, outcome {manifest.get('ladder_outcome')}")
    dead = steps[-1] if steps else {}
    if dead.get("name") != "concurrency" or not (dead.get("failure") or {}).get("evidence"):
        problems.append(f"the step in progress is not recorded with its evidence: {dead}")
    kept = [r.get("concurrency") for r in rungs]
    if not kept or kept != LADDER_RUNGS[: len(kept)] or len(kept) == len(LADDER_RUNGS):
        problems.append(f"rungs recorded: {kept}, expected c1 and not every rung")
    if not errors or "the server died during step concurrency" not in errors[0] or "--resume" not in errors[0]:
        problems.append(f"error line: {errors}")
    if (info.get("state"), info.get("resumable")) != ("failed", True):
        problems.append(f"oomkit runs: {info.get('state')}, resumable {info.get('resumable')}")
    o.why = (
        f"failed ({manifest.get('reason')}), exit {cli.rc}, {len(steps) - 1} step(s) + rungs {kept} kept; "
        f"dead step {dead.get('name')} recorded with evidence; listed resumable"
    )
    return _finish(o, runs, cli, problems)


def resume_ladder(workdir: Path, folder: Path) -> Outcome:
    """`oomkit ladder --resume` of the folder the dead engine left: a new server from the recorded profile."""
    o = Outcome("ladder --resume after the kill", "none (continues the dead ladder)", injected=0)
    runs = workdir / "runs"
    kept = [r.get("concurrency") for r in read_jsonl(folder / "rungs.jsonl")]
    cli = oomkit("ladder", "--resume", str(folder), "--runs-dir", str(runs), "--json")
    problems = cli.problems(0)
    manifest = json.loads((folder / "manifest.json").read_text())
    server = Path((manifest.get("resumes") or [{}])[-1].get("server_run") or folder)
    records = [r for r in read_jsonl(folder / "requests.jsonl") if r.get("attempt") == 1]
    answered = _count(o, records, server / "server.log")
    labels = sorted({r["label"] for r in records})
    info = listed(runs)
    o.detail.update(
        manifest=manifest,
        server_run=str(server),
        labels=labels,
        answered=answered,
        listed=info,
        steps=read_jsonl(folder / "steps.jsonl"),
        rungs=read_jsonl(folder / "rungs.jsonl"),
    )
    try:
        o.detail["result"] = data = cli.json()
    except ValueError:
        return _finish(o, runs, cli, problems + ["stdout is not the JSON result"])
    if [s["name"] for s in data["steps"]] != LADDER_STEPS or data["failure"] or not data["ran"]:
        problems.append(f"steps after resume: {[s['name'] for s in data['steps']]}, failure {data['failure']}")
    conc = next((st for st in data["steps"] if st["name"] == "concurrency"), {})
    rungs = [r["concurrency"] for r in (conc.get("detail") or {}).get("rungs", [])]
    expected = sorted({f"concurrency_c{c}" for c in rungs[len(kept) :]} | {"repeat"})
    if rungs[: len(kept)] != kept or labels != expected:  # the kept steps and rungs are not sent again
        problems.append(f"sent: {labels}, expected {expected} (rungs {rungs}, kept {kept})")
    o.detail.update(kept_rungs=kept, all_rungs=rungs)
    if (manifest["state"], manifest.get("reason"), manifest.get("error")) != ("complete", None, None):
        problems.append(f"manifest {manifest['state']}/{manifest.get('reason')}/{manifest.get('error')}")
    if (info.get(folder.name) or {}).get("state") != "complete" or server.name in info:
        problems.append(f"oomkit runs: {sorted(info)}")
    o.why = f"complete: 6 steps; sent only {', '.join(labels)} on a new server"
    return _finish(o, runs, cli, problems)


def proxy_faults(workdir: Path, upstream: str) -> list[Outcome]:
    """`oomkit bench` through the fault proxy, one fault per request (SCHEDULE), one request per
    session, one session at a time: every request must be recorded with its class."""
    workload = _write(
        workdir / "workload.yaml", {**WORKLOAD, "sessions": len(SCHEDULE), "steps": 1, "output_tokens": 32}
    )
    runs = workdir / "runs"
    with FaultProxy(upstream, SCHEDULE) as proxy:
        cli = oomkit(
            "bench",
            "--url",
            proxy.url,
            "--workload",
            str(workload),
            "--concurrency",
            "1",
            "--memory",
            "none",
            "--stall-timeout-s",
            f"{STALL_TIMEOUT_S:g}",
            "--json",
            "--runs-dir",
            str(runs),
        )
        log = list(proxy.log)
    folder = next((p.parent for p in runs.glob("*/requests.jsonl")), None)
    records = requests_in(folder) if folder else []
    outcomes = []
    for name, kinds in ROWS:
        o = Outcome(name, ", ".join(kinds), injected=len(kinds))
        picked = [i for i, entry in enumerate(log) if entry["fault"] in kinds]
        o.sent, o.recorded = len(picked), sum(1 for i in picked if i < len(records))
        got = {log[i]["fault"]: records[i].get("error_kind") for i in picked if i < len(records)}
        o.detail.update(kinds=got, records=[records[i] for i in picked if i < len(records)], proxy_log=log)
        problems = cli.problems(0) + [
            f"{f}: recorded as {k!r}, expected {EXPECTED_KIND[f]!r}" for f, k in got.items() if k != EXPECTED_KIND[f]
        ]
        if len(records) != len(log):
            problems.append(f"{len(log)} requests proxied, {len(records)} recorded")
        o.why = ", ".join(f"{f}: {k or 'ok'}" for f, k in got.items())
        outcomes.append(_finish(o, runs, cli, problems))
    return outcomes


# --- all of it ---------------------------------------------------------------------------------------
def _with_resume(killed: Outcome, resume: Callable[[Outcome], Outcome], needs: str) -> list[Outcome]:
    """The kill and its --resume; surviving the kill includes finishing the work later."""
    if not killed.detail.get(needs):
        return [killed]
    resumed = resume(killed)
    if not resumed.survived:
        killed.survived, killed.why = False, f"{killed.why}; --resume failed: {resumed.why}"
    return [killed, resumed]


def run_faults(workdir: Path) -> dict[str, Any]:
    """Every scenario, one vLLM server at a time; the figures robustness.py reports."""
    from _load_vllm import vllm_server

    workdir.mkdir(parents=True, exist_ok=True)
    outcomes = [
        port_taken(workdir / "port"),
        port_taken_during_start(workdir / "port-start"),
        engine_killed_during_start(workdir / "start"),
    ]
    compare = engine_killed_during_compare(workdir / "compare")
    ladder = _with_resume(
        engine_killed_during_ladder(workdir / "ladder"),
        lambda o: resume_ladder(workdir / "ladder", Path(o.detail["folder"])),
        "folder",
    )
    (workdir / "server").mkdir(exist_ok=True)
    with vllm_server(workdir / "server") as server:
        outcomes += _with_resume(
            compare,
            lambda o: resume_compare(workdir / "compare", Path(o.detail["compare_folder"]), server.url),
            "compare_folder",
        )
        outcomes += ladder + proxy_faults(workdir / "proxy", server.url)
    return {
        "faults_injected": sum(o.injected for o in outcomes),
        "faults_survived": sum(o.injected for o in outcomes if o.survived),
        "records_lost": sum(o.lost for o in outcomes),
        "survivors": sum(len(o.survivors) for o in outcomes),
        "unparseable": sum(o.unparseable for o in outcomes),
        "scenarios": [o.row() for o in outcomes],
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{'scenario':<32} {'faults':>6} {'survived':<8} {'sent':>4} {'kept':>4} {'lost':>4} {'bad files':>9} "
        f"{'survivors':>9}  why"
    ]
    for s in result["scenarios"]:
        lines.append(
            f"{s['scenario']:<32} {s['injected']:>6} {'yes' if s['survived'] else 'NO':<8} {s['sent']:>4} "
            f"{s['recorded']:>4} {s['lost']:>4} {s['unparseable']:>9} {len(s['survivors']):>9}  {s['why']}"
        )
    lines.append(
        f"faults injected {result['faults_injected']}, survived {result['faults_survived']}, "
        f"records lost {result['records_lost']}, unparseable files {result['unparseable']}, "
        f"vLLM processes left {result['survivors']}"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workdir", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="oomkit-faults-") as tmp:
        result = run_faults(args.workdir or Path(tmp))
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0 if result["faults_survived"] == result["faults_injected"] and not result["records_lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
