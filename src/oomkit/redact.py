"""Secrets never leave oomkit: every line printed or written passes through `redact`."""

from __future__ import annotations

import re
from collections.abc import Callable

MASK = "***"

_SECRET_NAMES = r"(?:api_key|hf_token|token|access_token|secret|password)"
# A list under a secret name, as Python prints it: vLLM's api_key is a list ('api_key': ['k1', 'k2']).
_SECRET_LIST = re.compile(r"(?i)((?<![A-Za-z0-9_])[\"']?" + _SECRET_NAMES + r"[\"']?\s*[:=]\s*\[)([^\]]*)(\])")
_LIST_ITEM = re.compile(r"^(\s*[\"']?)(.*?)([\"']?\s*)$", re.DOTALL)


def _mask_items(m: re.Match[str]) -> str:
    items = [_LIST_ITEM.sub(r"\1" + MASK + r"\3", item) if item.strip() else item for item in m.group(2).split(",")]
    return m.group(1) + ",".join(items) + m.group(3)


# (pattern, replacement) — each keeps the name so the reader knows what was hidden.
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (_SECRET_LIST, _mask_items),
    # The header as text (Authorization: Bearer x) and as a Python dict prints it ('Authorization': 'Bearer x').
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?\s*(?:bearer|basic|token)\s+)[^\s\"',}]+"), r"\1" + MASK),
    (re.compile(r"(?i)(--(?:api-key|hf-token|token)(?:=|\s+))(?!\*\*\*)\S+"), r"\1" + MASK),
    # A flag and its value in a printed Python list: subprocess errors quote argv as ['--api-key', 'x'].
    (re.compile(r"(?i)([\"']--(?:api-key|hf-token|token)[\"'],\s*[\"'])(?!\*\*\*)[^\"']+"), r"\1" + MASK),
    (
        re.compile(
            r"(?i)((?<![A-Za-z0-9_])[\"']?"
            + _SECRET_NAMES
            + r"[\"']?\s*[:=]\s*\[?\s*[\"']?)(?!\*\*\*)(?!None\b)(?!\$\{)([^\s\"',}\]\[]+)"
        ),
        r"\1" + MASK,
    ),
    # Environment assignments (NAME=value, NAME: value) of upper-case secret-named variables.
    (
        re.compile(
            r"\b([A-Z0-9_]*(?:TOKEN|API_KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)[A-Z0-9_]*[\"']?\s*[=:]\s*[\"']?)(?!\*\*\*)(?!\$\{)[^\s\"',}]+"
        ),
        r"\1" + MASK,
    ),
    (re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})\b"), MASK),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/\s:@]+):([^@\s/]+)@"), r"\1\2:" + MASK + "@"),
)

# Environment variable names whose values are secrets.
SECRET_ENV = re.compile(r"(?i)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)")


def redact(text: str) -> str:
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


SECRET_KEY = re.compile(r"(?i)^(?:api_key|api-key|hf_token|token|access_token|secret|password|authorization)$")


def redact_obj(obj: object) -> object:
    """Redact a JSON-like value: secret-named keys are masked whatever their value, strings scanned."""
    if isinstance(obj, dict):
        return {
            k: (
                MASK
                if isinstance(k, str) and SECRET_KEY.match(k) and obj[k] not in (None, "", [], False)
                else redact_obj(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact(obj)
    return obj


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if SECRET_ENV.search(k) and v else redact(v)) for k, v in env.items()}


_SECRET_FLAG = re.compile(r"--(?:api-key|hf-token|token)")


def redact_args(args: list[str]) -> list[str]:
    """Redact a command line: the values after a secret flag are masked too, up to the next flag
    (vLLM's --api-key takes several keys)."""
    out: list[str] = []
    hiding = first = False
    for arg in args:
        if hiding and (first or not arg.startswith("-")):
            out.append(MASK)
            first = False
            continue
        hiding = first = bool(_SECRET_FLAG.fullmatch(arg))
        out.append(redact(arg))
    return out
