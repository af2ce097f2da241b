"""Secrets never leave oomkit: every line printed or written passes through `redact`."""

from __future__ import annotations

import re

MASK = "***"

# (pattern, replacement) — each keeps the name so the reader knows what was hidden.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(authorization\s*[:=]\s*[\"']?\s*(?:bearer|basic|token)\s+)[^\s\"',}]+"), r"\1" + MASK),
    (re.compile(r"(?i)(--(?:api-key|hf-token|token)(?:=|\s+))(?!\*\*\*)\S+"), r"\1" + MASK),
    (re.compile(r"(?i)((?<![A-Za-z0-9_])[\"']?(?:api_key|hf_token|token|access_token|secret|password)[\"']?\s*[:=]\s*\[?\s*[\"']?)(?!\*\*\*)(?!None\b)(?!\$\{)([^\s\"',}\]]+)"), r"\1" + MASK),
    # Environment assignments (NAME=value, NAME: value) of upper-case secret-named variables.
    (re.compile(r"\b([A-Z0-9_]*(?:TOKEN|API_KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)[A-Z0-9_]*[\"']?\s*[=:]\s*[\"']?)(?!\*\*\*)(?!\$\{)[^\s\"',}]+"), r"\1" + MASK),
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
        return {k: (MASK if isinstance(k, str) and SECRET_KEY.match(k) and obj[k] not in (None, "", [], False)
                    else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact(obj)
    return obj


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if SECRET_ENV.search(k) and v else redact(v)) for k, v in env.items()}


def redact_args(args: list[str]) -> list[str]:
    """Redact a command line: a value following a secret flag is masked too."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if re.fullmatch(r"--(?:api-key|hf-token|token)", arg):
            hide_next = True
        out.append(redact(arg))
    return out
