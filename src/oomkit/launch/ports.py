"""Is the profile's port free? Answered before vLLM starts, so a taken port costs a second, not a
minute of start-up that ends in `Address already in use`.

A plain bind says "in use" in three cases, and only two of them stop vLLM:
- a process listens there (the classic: a vLLM left over from an earlier run);
- a server that is starting has bound it but does not listen yet (vLLM binds before its engine
  starts and listens only when ready, vllm/entrypoints/launchers/launcher.py `setup_server`);
- connections of a server that stopped linger in TIME_WAIT. vLLM sets SO_REUSEADDR, so it
  binds anyway: refusing the port then would be a false alarm for up to a minute after a restart.
"""

from __future__ import annotations

import errno
import socket

from oomkit.errors import InputError

HINT = "stop what listens there, choose another `port:`, or set `port: auto`"


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _binds(host: str, port: int, reuse: bool) -> OSError | None:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return err
    return None


def _sockets_on(port: int) -> list[tuple[str, int | None]]:
    """(status, pid) of every TCP socket whose local port is `port`; pid None when not ours to see."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return [(c.status, c.pid) for c in conns if c.laddr and c.laddr.port == port]


def _who(pid: int | None) -> str:
    import psutil

    if pid is None:
        return ""
    try:
        cmd = " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return f" by pid {pid}"
    return f" by pid {pid} ({cmd[:80]})"


def check_port(host: str, port: int) -> None:
    """Fail before starting vLLM if the port is taken (see the module docstring for the cases)."""
    strict = _binds(host, port, reuse=False)
    if strict is None:
        return
    if strict.errno == errno.EADDRINUSE:
        sockets = _sockets_on(port)
        listeners = [pid for status, pid in sockets if status == "LISTEN"]
        lingering = any(status == "TIME_WAIT" for status, _ in sockets)
        if not listeners and lingering and _binds(host, port, reuse=True) is None:
            return  # only connections of a stopped server linger: vLLM binds with SO_REUSEADDR
        message = f"port {port} on {host} is in use{_who(listeners[0]) if listeners else ''}"
        if not sockets:
            message += " (bound, not listening yet: a server still starting?)"
        raise InputError(message, hint=HINT) from strict
    raise InputError(f"port {port} on {host} is in use or not available ({strict.strerror})", hint=HINT) from strict


def free_port(host: str) -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
