"""Start vLLM in its own process group and stop the whole group, verifying that nothing survives.

A leftover worker that still holds GPU memory is a classic cause of the next OOM, so stopping
ends with a check of every process the server ever had, not only the one we started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from oomkit.errors import InputError
from oomkit.launch.memory import ProcessTree
from oomkit.launch.ports import check_port, free_port  # noqa: F401  (imported from here by older callers)
from oomkit.serial import JsonObject

PR_SET_PDEATHSIG = 1  # linux/prctl.h
GRACE_AFTER_TERM_GROUP_S = 5.0
CHILDREN_EXIT_S = 2.0


@dataclass(frozen=True)
class StopReport:
    """How the server ended."""

    requested: bool
    """True when oomkit stopped it; False when it had already exited by itself."""
    exit_code: int | None
    """The API server's exit status (negative: killed by that signal). Do not judge a run by it:
    vLLM exits 0 after its engine died at runtime."""
    signals: tuple[str, ...]
    """What oomkit sent, in order: SIGTERM (server), SIGTERM (group), SIGKILL (group)."""
    stop_s: float
    killed_pids: tuple[int, ...] = ()
    """Processes still alive after the graceful stop that oomkit had to SIGKILL."""
    survivors: tuple[int, ...] = ()
    """Processes still alive after everything: these may hold memory. Empty on success."""
    seen_pids: tuple[int, ...] = field(default_factory=tuple)

    def to_dict(self) -> JsonObject:
        return {
            "requested": self.requested,
            "exit_code": self.exit_code,
            "signals": list(self.signals),
            "stop_s": round(self.stop_s, 3),
            "killed_pids": list(self.killed_pids),
            "survivors": list(self.survivors),
            "seen_pids": list(self.seen_pids),
        }


def _die_with_parent_hook() -> Callable[[], None]:
    """A preexec_fn: if oomkit dies (even by SIGKILL) the kernel sends SIGTERM to the server,
    which then tears down its own engine and workers. libc is loaded here, in the parent, so the
    child between fork and exec only makes two system calls."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # oomkit died before the death signal was armed
            os._exit(1)

    return hook


class ServerProcess:
    """The started server: a Popen in a new session (its pid is the group id)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None):
        try:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),
            )
        except FileNotFoundError as err:
            raise InputError(
                f"cannot start vLLM: {argv[0]} not found", hint="install vLLM, or fix `start:` in the profile"
            ) from err
        except PermissionError as err:
            raise InputError(f"cannot start vLLM: {argv[0]} is not executable") from err
        self.pid = self.popen.pid
        self.pgid = self.pid
        self.started = time.monotonic()
        self.tree = ProcessTree(self.pid)

    @property
    def stdout(self) -> IO[bytes]:
        assert self.popen.stdout is not None
        return self.popen.stdout

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def stop(self, timeout_s: float = 30.0) -> StopReport:
        """SIGTERM the server and wait; then SIGTERM, then SIGKILL what is left of the group and
        of every process ever seen in the tree; report anything that still survives."""
        began = time.monotonic()
        grace_s = min(GRACE_AFTER_TERM_GROUP_S, timeout_s)
        requested = self.alive()
        self.tree.live()  # remember the current children before the parent goes
        signals: list[str] = []
        if requested:
            signals.append("SIGTERM")
            self._signal_server(signal.SIGTERM)
            self.wait(timeout_s)
        _wait_gone(self.tree, min(CHILDREN_EXIT_S, timeout_s))  # vLLM's helpers exit just after it
        leftovers = self.tree.live()
        if leftovers or self._group_alive():
            signals.append("SIGTERM-group")
            self._signal_group(signal.SIGTERM, leftovers)
            _wait_gone(self.tree, grace_s)
        killed = [p.pid for p in self.tree.live()]
        if killed or self._group_alive():
            signals.append("SIGKILL-group")
            self._signal_group(signal.SIGKILL, self.tree.live())
            _wait_gone(self.tree, GRACE_AFTER_TERM_GROUP_S)
        self.wait(1.0)
        survivors = tuple(sorted({p.pid for p in self.tree.live()} | set(group_members(self.pgid))))
        return StopReport(
            requested,
            self.popen.poll(),
            tuple(signals),
            time.monotonic() - began,
            tuple(killed),
            survivors,
            tuple(self.tree.seen_pids()),
        )

    def _signal_server(self, sig: int) -> None:
        try:
            self.popen.send_signal(sig)
        except ProcessLookupError:
            pass

    def _signal_group(self, sig: int, procs: list[Any]) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in procs:  # a child that left the group (setsid) is still ours
            try:
                proc.send_signal(sig)
            except Exception:
                pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # killpg(0) also succeeds while only zombies remain, so look at the members themselves.
        return bool(self.tree.live()) or self.alive() or bool(group_members(self.pgid))

    def wait(self, timeout_s: float) -> None:
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    import psutil

    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                members.append(pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _wait_gone(tree: ProcessTree, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while tree.live() and time.monotonic() < deadline:
        time.sleep(0.05)
