"""Is there an OpenAI-compatible server at this URL, and what does it serve? Sync, run once
before a load starts; every way it can fail becomes an InputError that says what to do."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from oomkit.errors import InputError, RunFailed
from oomkit.serial import JsonObject, to_json_object

PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerInfo:
    base_url: str
    model: str
    """The first model the server lists (what requests are sent to unless --model is given)."""
    models: tuple[str, ...]
    max_model_len: int | None
    """vLLM adds max_model_len to /v1/models; other servers leave it out (unknown)."""

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


def normalise_url(url: str) -> str:
    """`http://host:port`, `http://host:port/`, `.../v1` all mean the server root."""
    root = url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    if not root.startswith(("http://", "https://")):
        raise InputError(f"--url {url!r} is not an http(s) URL", hint="e.g. --url http://127.0.0.1:8000")
    return root


def headers_for(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def probe(
    url: str, api_key: str | None = None, model: str | None = None, timeout_s: float = PROBE_TIMEOUT_S
) -> ServerInfo:
    base = normalise_url(url)
    try:
        with httpx.Client(base_url=base, headers=headers_for(api_key), timeout=timeout_s, trust_env=False) as http:
            resp = http.get("/v1/models")
    except httpx.ConnectError as err:
        raise RunFailed(
            f"nothing answers at {base} ({err})", hint="start the server first, or check host and port"
        ) from err
    except httpx.TimeoutException as err:
        raise RunFailed(
            f"{base} did not answer GET /v1/models within {timeout_s:g} s",
            hint="check that the server is up and not overloaded",
        ) from err
    except httpx.HTTPError as err:
        raise InputError(f"{base} is not an OpenAI-compatible server: {err}") from err
    return _read_models(base, resp, model)


def _read_models(base: str, resp: httpx.Response, model: str | None) -> ServerInfo:
    if resp.status_code in (401, 403):
        raise InputError(
            f"{base} refused the request (HTTP {resp.status_code})", hint="pass --api-key or set OOMKIT_API_KEY"
        )
    try:
        data = resp.json()
        cards = [c for c in data["data"] if isinstance(c, dict) and isinstance(c.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        cards = None
    if resp.status_code != 200 or not cards:
        raise InputError(
            f"{base} is not an OpenAI-compatible server: GET /v1/models answered "
            f"HTTP {resp.status_code} {resp.text[:80]!r}",
            hint="give the URL of a vLLM/SGLang/llama.cpp/TGI OpenAI endpoint",
        )
    ids = tuple(c["id"] for c in cards)
    chosen = model or ids[0]
    if chosen not in ids:
        raise InputError(f"model {chosen!r} is not served at {base}", hint=f"served: {', '.join(ids)}")
    card = next(c for c in cards if c["id"] == chosen)
    mml = card.get("max_model_len")
    return ServerInfo(base, chosen, ids, int(mml) if isinstance(mml, int) else None)


def health(base_url: str, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET /health (vLLM answers 503 once its engine is dead); None if unreachable."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as http:
            return http.get(f"{base_url}/health").status_code
    except httpx.HTTPError:
        return None
