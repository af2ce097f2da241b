"""`oomkit launch PROFILE --check`: start, wait for ready, send one short request, stop, report.
The "does this profile still start?" smoke test to run after every image or driver update."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oomkit.launch.profile import Profile
from oomkit.launch.server import Event, LaunchFailed, LaunchResult, Server, launched
from oomkit.serial import JsonObject

CHECK_PROMPT = "The quick brown fox"
CHECK_MAX_TOKENS = 4
CHECK_REQUEST_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RequestCheck:
    """The one request a check sends: a short /v1/completions call."""

    ok: bool
    status: int | None
    latency_ms: float
    completion_tokens: int | None
    error: str | None

    def to_dict(self) -> JsonObject:
        return {
            "ok": self.ok,
            "status": self.status,
            "latency_ms": round(self.latency_ms, 1),
            "completion_tokens": self.completion_tokens,
            "error": self.error,
        }


@dataclass(frozen=True)
class CheckResult:
    launch: LaunchResult
    request: RequestCheck | None

    @property
    def healthy(self) -> bool:
        return self.launch.ready and self.launch.state == "complete" and bool(self.request and self.request.ok)

    def to_dict(self) -> JsonObject:
        return {
            "healthy": self.healthy,
            **self.launch.to_dict(),
            "request": self.request.to_dict() if self.request else None,
        }


def send_check_request(server: Server) -> RequestCheck:
    import httpx

    body = {"model": server.model_ids[0], "prompt": CHECK_PROMPT, "max_tokens": CHECK_MAX_TOKENS, "temperature": 0}
    began = time.monotonic()
    try:
        with httpx.Client(trust_env=False, timeout=CHECK_REQUEST_TIMEOUT_S, headers=server.headers) as client:
            resp = client.post(server.base_url + "/v1/completions", json=body)
    except httpx.HTTPError as err:
        return RequestCheck(False, None, (time.monotonic() - began) * 1000, None, f"{type(err).__name__}: {err}")
    latency_ms = (time.monotonic() - began) * 1000
    tokens = None
    error = None
    try:
        data = resp.json()
        tokens = data.get("usage", {}).get("completion_tokens")
        error = (data.get("error") or {}).get("message") if resp.status_code != 200 else None
    except ValueError:
        error = f"not JSON: {resp.text[:200]}"
    ok = resp.status_code == 200 and bool(tokens)
    return RequestCheck(ok, resp.status_code, latency_ms, tokens, error if not ok else None)


def check_profile(
    profile: Profile | str | Path,
    runs_dir: str | Path = "runs",
    label: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> CheckResult:
    """Start the profile's server, send one request, stop it. Failure is a result, not an error;
    bad input (profile, port, missing vLLM) still raises before anything starts."""
    request: RequestCheck | None = None
    try:
        with launched(profile, runs_dir=runs_dir, label=label, on_event=on_event) as server:
            request = send_check_request(server)
            server.run.update(check_request=request.to_dict())
            # /health after the request: a request can kill the engine while the API server lives on.
            if request.ok and not _healthy(server):
                request = RequestCheck(
                    False,
                    request.status,
                    request.latency_ms,
                    request.completion_tokens,
                    "/health failed after the request",
                )
    except LaunchFailed as err:
        return CheckResult(err.result, request)
    assert server.result is not None
    return CheckResult(server.result, request)


def _healthy(server: Server) -> bool:
    import httpx

    try:
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            return client.get(server.base_url + "/health").status_code == 200
    except httpx.HTTPError:
        return False
