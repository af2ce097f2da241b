"""Secrets are masked in every line oomkit prints or writes; figures named like tokens are not."""

import pytest

from oomkit.redact import MASK, redact, redact_args, redact_env, redact_obj

SECRETS = [
    ("--api-key sk-abcdefghijklmnopqrstu", "sk-abcdefghijklmnopqrstu"),
    ("--hf-token=hf_abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnopqrstuvwxyz"),
    ("Authorization: Bearer eyJhbGciOi.abc", "eyJhbGciOi.abc"),
    ("'api_key': ['sk-live-abcdefghijklmnopqrstuvwx']", "sk-live-abcdefghijklmnopqrstuvwx"),
    ("https://user:hunter2@mirror.example/simple", "hunter2"),
    ("OPENAI_API_KEY=plainvalue", "plainvalue"),
    ("export MY_HF_TOKEN=abc123", "abc123"),
    ("token=abc123", "abc123"),
]


@pytest.mark.parametrize("text,secret", SECRETS)
def test_secret_masked(text, secret):
    out = redact(text)
    assert secret not in out and MASK in out


@pytest.mark.parametrize(
    "text",
    [
        '"kv_bytes_per_token": 27648',
        "max_tokens: 5",
        "kv_cache_tokens=1024",
        "HF_TOKEN: ${HF_TOKEN}",
        "Prefix cache hit rate: 61.0%",
    ],
)
def test_not_a_secret(text):
    assert redact(text) == text


def test_args_env_obj():
    assert redact_args(["vllm", "--api-key", "s3cr3t", "--port", "8000"]) == [
        "vllm",
        "--api-key",
        MASK,
        "--port",
        "8000",
    ]
    assert redact_env({"HF_TOKEN": "x", "VLLM_PORT": "1"}) == {"HF_TOKEN": MASK, "VLLM_PORT": "1"}
    assert redact_obj({"api_key": ["k"], "nested": [{"password": "p", "n": 1}]}) == {
        "api_key": MASK,
        "nested": [{"password": MASK, "n": 1}],
    }
