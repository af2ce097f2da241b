"""Token counts: the server's own tokenizer through vLLM's /tokenize when it has one, otherwise
an approximation of 4 characters per token (OpenAI's rule of thumb for English text; our filler
is English words, so it is within about 25% for BPE vocabularies of 32k-200k tokens)."""

from __future__ import annotations

import math
from typing import Protocol

import httpx

from oomkit.serial import JsonObject

CHARS_PER_TOKEN = 4.0
TOKENIZE_TIMEOUT_S = 30.0


class TokenCounter(Protocol):
    source: str

    def count(self, text: str) -> int: ...

    def count_chat(self, body: JsonObject) -> int | None: ...


class ApproxCounter:
    source = f"approximation: {CHARS_PER_TOKEN:g} characters per token"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def count_chat(self, body: JsonObject) -> int | None:
        return None  # the chat template is unknown: do not pretend


class ServerCounter:
    """vLLM's POST /tokenize (plain prompt, and chat messages with tools through the template)."""

    def __init__(self, http: httpx.Client, model: str):
        self.http = http
        self.model = model
        self.source = f"server /tokenize ({model})"
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if text not in self._cache:
            resp = self.http.post("/tokenize", json={"model": self.model, "prompt": text, "add_special_tokens": False})
            resp.raise_for_status()
            self._cache[text] = int(resp.json()["count"])
        return self._cache[text]

    def count_chat(self, body: JsonObject) -> int | None:
        payload: JsonObject = {"model": self.model, "messages": body["messages"], "add_generation_prompt": True}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        try:
            resp = self.http.post("/tokenize", json=payload)
            resp.raise_for_status()
            return int(resp.json()["count"])
        except (httpx.HTTPError, KeyError, ValueError):
            return None


def server_counter(base_url: str, model: str, api_key: str | None = None) -> tuple[TokenCounter, str | None]:
    """The server's tokenizer if /tokenize answers, else the approximation and the reason why."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    http = httpx.Client(base_url=base_url, headers=headers, timeout=TOKENIZE_TIMEOUT_S, trust_env=False)
    counter = ServerCounter(http, model)
    try:
        counter.count("hello world")
    except (httpx.HTTPError, KeyError, ValueError, TypeError) as err:
        http.close()
        return ApproxCounter(), f"/tokenize unavailable ({type(err).__name__}): sizes are approximate"
    return counter, None
