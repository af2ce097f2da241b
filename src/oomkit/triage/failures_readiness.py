"""Readiness checks that run outside vLLM and gave up on a server that did not come up: an orchestrator's probe
(Kubernetes), a hosting platform's start-up limit (Modal), a training framework's client polling the server's
health endpoint (TRL, ms-swift). vLLM itself prints nothing then; the log only says that the wait went on, or ran
out."""

from __future__ import annotations

from oomkit.triage.rules import Failure, rx

READINESS_FAILURES: tuple[Failure, ...] = (
    Failure(
        "E-PROBE",
        # The waits, not the give-up: each repeats while the server starts, so any later start-up marker drops the
        # hit (a start that was only slow). A liveness probe is left out: it also fails on a server that served and
        # then hung, which the corpus files apart from start-up stalls.
        rx(
            r"\b(?:Startup|Readiness) probe failed: "
            r"|\bhas been initializing for too long\b"
            r"|\bServer is not up yet\. Retrying in "
        ),
        "stall",
        "timeout",
        False,
        50,
        "a readiness check outside vLLM kept failing while the engine started, and the log ends in it: the start "
        "hangs or is slower than the check allows (raise the probe's or platform's start-up limit, or read the "
        "engine's own log for where it stopped)",
        'Startup probe failed: Get "http://10.244.0.208:8000/health": dial tcp 10.244.0.208:8000: connect: '
        "connection refused",
        "Kubernetes kubelet prober events ('Startup probe failed: ', 'Readiness probe failed: '); Modal's runner "
        "start-up limit ('Runner has been initializing for too long: 300 seconds', modal-labs/modal-examples#1154); "
        "trl/extras/vllm_client.py check_server_health ('Server is not up yet. Retrying in N seconds...'), as "
        "ms-swift's rollout client words it too",
    ),
    Failure(
        "E-MQWAIT",
        # V0's OpenAI server (0.6-0.10) talks to its engine process over ZeroMQ; the client's loop logs this each time
        # a poll for the engine's output runs out (VLLM_RPC_TIMEOUT) with nothing, at debug level. Before the server is
        # ready, and with nothing after it, that is an engine that never came up; after the ready line it is an idle
        # server, and any later failure line is what ended the wait (the client polls every 10 s while a long start-up
        # runs).
        rx(r"Waiting for output from MQLLMEngine"),
        "stall",
        "timeout",
        False,
        50,
        "V0's API server kept waiting for its engine process, which never answered during start-up: the engine hangs "
        "(read its own lines above for the last step it reached) or died without a word",
        "DEBUG 05-31 01:41:57 client.py:191] Waiting for output from MQLLMEngine.",
        "vllm/engine/multiprocessing/client.py MQLLMEngineClient.run_output_handler_loop (0.6-0.10)",
    ),
    Failure(
        "E-CLIENTWAIT",
        # The client's give-up after total_timeout: the server never answered its health endpoint.
        rx(r"\bvLLM server (?:can't be reached at \S+|at \S+ could not be reached) after \d+ seconds"),
        "timeout",
        "timeout",
        False,
        64,
        "the training framework's client gave up waiting for the vLLM server to answer its health check: the "
        "server never became ready (read its own log for the failure)",
        "ConnectionError: The vLLM server can't be reached at 0.0.0.0:8000 after 240 seconds. Make sure the server "
        "is running by running `trl vllm-serve`.",
        "trl/extras/vllm_client.py check_server_health (ConnectionError after total_timeout)",
    ),
)
