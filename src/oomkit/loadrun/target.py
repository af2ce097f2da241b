"""The server a load goes to: a URL we were given, or a server oomkit launched from a profile."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomkit.client.probe import ServerInfo, probe
from oomkit.errors import MissingDependency
from oomkit.rundir import RunDir
from oomkit.serial import JsonObject

if TYPE_CHECKING:
    from oomkit.triage.model import TriageResult


@dataclass
class Target:
    base_url: str
    info: ServerInfo
    api_key: str | None = None
    server_pid: int | None = None
    log_path: Path | None = None
    run_dir: RunDir | None = None
    """The launch's run folder (the load records into it); None for --url."""
    alive: Callable[[], bool] | None = None
    triage: Callable[[], TriageResult] | None = None
    """The launched server's log read so far (oomkit.triage); None for --url."""
    profile_max_model_len: int | None = None
    """The launch profile's args.max_model_len, when it sets a number (launched servers only)."""

    @property
    def model(self) -> str:
        return self.info.model

    @property
    def launched(self) -> bool:
        return self.triage is not None

    def context_limit(self) -> tuple[int | None, str]:
        """max_model_len and where it was read: /v1/models (vLLM), else the profile's args."""
        if self.info.max_model_len is not None:
            return self.info.max_model_len, "GET /v1/models"
        if self.profile_max_model_len is not None:
            return self.profile_max_model_len, "the profile's args.max_model_len"
        return None, "unknown: the server does not report max_model_len"

    def describe(self) -> JsonObject:
        return {
            "base_url": self.base_url,
            "launched": self.launched,
            "server_pid": self.server_pid,
            "log_path": str(self.log_path) if self.log_path else None,
            **self.info.to_dict(),
        }


def api_key_from_env(api_key: str | None) -> str | None:
    return api_key or os.environ.get("OOMKIT_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def url_target(url: str, api_key: str | None = None, model: str | None = None) -> Target:
    key = api_key_from_env(api_key)
    info = probe(url, key, model)
    return Target(info.base_url, info, key)


@contextlib.contextmanager
def profile_target(
    profile: str, runs_dir: str = "runs", label: str | None = None, model: str | None = None
) -> Iterator[Target]:
    """Launch the profile's server (oomkit.launch), yield it as a Target, stop it afterwards."""
    try:
        from oomkit.launch import launched
    except ImportError as err:
        raise MissingDependency(
            f"--profile needs oomkit.launch ({err})", hint="use --url with a running server"
        ) from err
    with launched(profile, runs_dir=runs_dir, label=label) as server:
        # The launch's own RunDir object: a second one on the same folder would overwrite its
        # manifest updates (each rewrites the whole file from memory).
        run = server.run if isinstance(getattr(server, "run", None), RunDir) else RunDir.open(server.run_dir)
        api_key = server.profile.api_key()  # a list of keys in args renders as one Bearer token each
        info = probe(server.base_url, api_key, model)
        yield Target(
            info.base_url,
            info,
            api_key,
            server_pid=server.pid,
            log_path=Path(server.log_path),
            run_dir=run,
            alive=server.alive,
            triage=server.triage,
            profile_max_model_len=_int_arg(server.profile.arg("max_model_len")),
        )


def _int_arg(value: Any) -> int | None:
    """A vLLM argument given as a whole number (not "auto", -1 or "32k")."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        return None
    return int(value)
