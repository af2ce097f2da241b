"""The foreground `oomkit launch PROFILE`: serve until Ctrl-C, SIGTERM or `oomkit launch --stop`,
and `stop_run`, which ends a run that another oomkit process owns."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomkit.errors import RunFailed
from oomkit.fsio import json_list, json_object
from oomkit.launch.memory import _psutil
from oomkit.launch.profile import Profile
from oomkit.launch.server import Event, LaunchFailed, LaunchResult, Server, StopRequested, launched
from oomkit.rundir import FINAL_STATES, RunDir, find_run
from oomkit.serial import Json, JsonObject

STOP_WAIT_EXTRA_S = 20.0  # on top of the profile's stop_timeout_s: group kill and verification


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """While active, SIGTERM (and SIGHUP) raise StopRequested in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise StopRequested(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def serve(
    profile: Profile | str | Path,
    runs_dir: str | Path = "runs",
    label: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> LaunchResult:
    """Start the server and keep it until it is asked to stop; the result once it has stopped
    (state complete, interrupted by Ctrl-C, or failed: not ready, died, survivors)."""
    server: Server | None = None
    try:
        with sigterm_stops():
            with launched(profile, runs_dir=runs_dir, label=label, on_event=on_event) as server:
                server.emit("serving", f"stop with Ctrl-C, SIGTERM, or: oomkit launch --stop {server.run_dir}")
                server.wait_exit()
    except LaunchFailed as err:
        return err.result
    except (KeyboardInterrupt, StopRequested):
        if server is None or server.result is None:
            raise  # interrupted before the server existed: nothing was recorded
    assert server is not None and server.result is not None
    return server.result


@dataclass(frozen=True)
class StopOutcome:
    run_dir: Path
    state: str
    how: str
    """signalled-owner (the oomkit that launched it stopped it), killed-group (its owner was gone),
    already-ended."""
    survivors: tuple[int, ...]

    def to_dict(self) -> JsonObject:
        return {"run_dir": str(self.run_dir), "state": self.state, "how": self.how, "survivors": list(self.survivors)}


def stop_run(ref: str | Path, runs_dir: str | Path = "runs") -> StopOutcome:
    """Stop a running launch. Its oomkit gets SIGTERM and stops the server itself (so the manifest
    is finalised by its owner); if that oomkit is gone, the server's group is killed from here."""
    run = find_run(ref, runs_dir)
    manifest = run.manifest()
    if run.state in FINAL_STATES:
        return StopOutcome(run.path, run.state, "already-ended", ())
    owner = _live(manifest.get("oomkit_pid"), manifest.get("oomkit_create_time"))
    stop_timeout_s = json_object(manifest.get("profile")).get("stop_timeout_s", 30.0)
    wait_s = float(stop_timeout_s if isinstance(stop_timeout_s, int | float) else 30.0) + STOP_WAIT_EXTRA_S
    if owner is not None:
        owner.send_signal(signal.SIGTERM)
        state = _wait_final(run, wait_s)
        if state in FINAL_STATES:
            stop = json_object(run.manifest().get("stop"))
            survivors = tuple(p for p in json_list(stop.get("survivors")) if isinstance(p, int))
            return StopOutcome(run.path, state, "signalled-owner", survivors)
    return _kill_orphaned_server(run, manifest)


def _live(pid: Json | None, create_time: Json | None) -> Any:
    """The psutil.Process of `pid` when it still runs and is the process recorded, else None."""
    psutil = _psutil()
    if not isinstance(pid, int):
        return None
    try:
        proc = psutil.Process(pid)
        if isinstance(create_time, int | float) and abs(proc.create_time() - float(create_time)) > 1.0:
            return None  # the pid was reused by an unrelated process
        return proc if proc.is_running() else None
    except psutil.Error:
        return None


def _wait_final(run: RunDir, wait_s: float) -> str:
    deadline = time.monotonic() + wait_s
    state = run.state
    while time.monotonic() < deadline:
        run.reload()
        state = run.state
        if state in FINAL_STATES:
            return state
        time.sleep(0.25)
    return state


def _kill_orphaned_server(run: RunDir, manifest: JsonObject) -> StopOutcome:
    from oomkit.launch.runner import group_members

    server = json_object(manifest.get("server"))
    root = _live(server.get("pid"), server.get("create_time"))
    pgid = server.get("pgid")
    targets = [root] if root else []
    if isinstance(pgid, int):
        targets += [p for p in map(lambda pid: _live(pid, None), group_members(pgid)) if p]
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for proc in targets:
            try:
                proc.send_signal(sig)
            except Exception:
                pass
        _psutil().wait_procs(targets, timeout=wait_s)
        targets = [p for p in targets if p.is_running() and p.status() != "zombie"]
        if not targets:
            break
    survivors = tuple(p.pid for p in targets)
    state = "failed" if survivors else "interrupted"
    run.finish(
        state,
        reason="stopped by oomkit launch --stop (owner gone)",
        stop={"requested": True, "signals": ["SIGTERM", "SIGKILL"], "survivors": list(survivors)},
    )
    if survivors:
        raise RunFailed(
            f"processes survived the stop: {list(survivors)}", hint=f"kill them by pid; see {run.path}/manifest.json"
        )
    return StopOutcome(run.path, state, "killed-group", survivors)
