"""Lines that look like failures and are not: per-request errors while the engine serves on, fallbacks vLLM logs at
error level, probes, and the kill vLLM gives its own process tree (the engine skips or discounts them before the
failure rules in `failures.py`)."""

from __future__ import annotations

from oomkit.triage.rules import rx

# Lines that look like errors in every healthy run, or per-request errors that do not fail the
# deployment (a tool parser failing on a random model's text). Matched on the vLLM source file.
BENIGN_SOURCES = rx(r"tool_parser|reasoning_parser|serving_chat|serving\.py|api_utils|system_utils")
# Of those, the OpenAI server's request handlers (vllm/entrypoints/openai/serving_*.py, serving.py): an error there
# failed one request (HTTP 400/500: a prompt over max_model_len, a chat template or Harmony parse, a stream
# generator's exception) while the engine served on. Not the tool and reasoning parsers, which log an error for any
# model text they cannot parse, in runs that are otherwise healthy.
REQUEST_SOURCES = rx(r"(?:^|/)serving(?:_\w+)?\.py:")

# Lines vLLM logs at error level when it falls back rather than fails: not failures.
# ("Cannot use FA version N is not supported due to ...": get_flash_attn_version returns None and
# another attention path is used; vllm/attention/utils/fa_utils.py, vllm/v1/attention/backends/fa_utils.py.)
# NCCL's probe for an optional network plugin at INFO level ("NET/Plugin: Plugin load returned 2 : libnccl-net.so:
# cannot open shared object file"): NCCL goes on with its built-in transports (src/plugin/net.cc).
# vLLM's platform detection (vllm/platforms/__init__.py, 0.8+) probes every platform and logs each probe's failure at
# DEBUG ("Exception happens when checking CUDA platform: NVML Shared Library Not Found" on a ROCm host): not a failure.
FALLBACK_LINES = rx(
    r"Cannot use FA version \d+ is not supported due to|NCCL INFO NET/Plugin\b"
    r"|Exception happens when checking \w+ platform: |platform is not available because: "
)
# SIGKILL forms a shell or executor prints for a process vLLM killed itself after E-FATALSIG.
SELF_KILL = rx(r"^Killed$|exit code:? 137|exit code: -9\b")
