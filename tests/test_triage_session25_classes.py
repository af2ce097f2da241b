"""Classes of session 25 (issue 13). An out-of-memory line with nothing around it is placed at a request's prefill, the
likeliest phase (a start-up failure is pasted with its markers, a serving failure by its error line), at low
confidence. The API server answering an inference request with an error status (uvicorn's access log: 400, 422, 500,
503; not 404 or 405, a route the server does not have) is that request's failure, not the engine's, as is a
request handler's traceback an excerpt cuts before its header. V1's advice on `--kv-cache-memory`, which it logs once
CUDA graphs are captured, means the start-up's memory steps are behind the engine. argparse refusing a command line
("the following arguments are required"), huggingface_hub refusing a model name that is neither a repository id nor
a folder (HFValidationError) are the environment, as is a traceback cut inside Python's import of a module
(importlib.import_module, the frozen bootstrap's frames) or in vLLM's platform layer (vllm/platforms: device ids,
capability and config checks); vLLM's weight-loading OOM message is read with its dash set as an en
or em dash; the speculative decoder's "Loading drafter model..." is a weight-loading marker; and an excerpt that starts
on the executor's call of a worker method (`self.collective_rpc("determine_available_memory")`) is placed by that
method, as the same line inside a traceback was."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

from oomkit.triage.verdict_make import GUESSED_PHASE

READY = "(APIServer pid=1) INFO 03-04 14:50:00 [launcher.py:37] Application startup complete.\n"
ACCESS = '(APIServer pid=1) INFO:     10.0.0.8:52596 - "POST /v1/chat/completions HTTP/1.1" '
API = "(APIServer pid=1) ERROR 03-04 14:55:30 [serving.py:315] "

CASES = {
    "a_lone_oom_line_is_a_requests_prefill_at_low_confidence": Case(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 204.00 MiB. GPU 0 has a total capacity of "
        "79.25 GiB of which 120.00 MiB is free.\n",
        "serving_prefill",
        True,
        "low",
    ),
    "an_inference_request_answered_400_is_that_requests_failure": Case(
        READY + ACCESS + "200 OK\n" + ACCESS + "400 Bad Request\n",
        "not_oom_other",
        False,
        "low",
    ),
    "an_inference_request_answered_500_is_that_requests_failure": Case(
        READY + '(APIServer pid=1) INFO:     10.0.0.8:1 - "POST /v1/embeddings HTTP/1.1" 500 Internal Server Error\n',
        "not_oom_other",
        False,
    ),
    "a_route_the_server_does_not_have_is_no_failure": Case(
        READY + '(APIServer pid=1) INFO:     10.0.0.8:1 - "POST /generate HTTP/1.1" 404 Not Found\n',
        "healthy",
        False,
    ),
    "a_request_handlers_traceback_cut_before_its_header_is_that_requests_failure": Case(
        API + '  File "/usr/local/lib/python3.12/dist-packages/vllm/renderers/mistral.py", line 40, in '
        "safe_apply_chat_template\n" + API + "    raise ValueError(str(e)) from e\n" + API + "ValueError: Unexpected "
        "role 'user' after role 'tool'\n" + ACCESS + "400 Bad Request\n",
        "not_oom_other",
        False,
    ),
    "v1s_kv_cache_memory_advice_follows_graph_capture": Case(
        "(Worker_TP0 pid=223) INFO 08-22 04:42:13 [gpu_worker.py:789] Free memory on device (30.27/31.4 GiB) on "
        "startup. Desired GPU memory utilization is (0.92, 28.88 GiB). Actual usage is 15.03 GiB for consumed memory "
        "(weights + non-torch), 1.59 GiB for peak activation, and 0.09 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=12917635953` (12.03 GiB) to fit into requested memory, "
        "or `--kv-cache-memory=14405811712` (13.42 GiB) to fully utilize gpu memory. Current kv cache memory in use "
        "is 12.26 GiB.\n",
        "healthy",
        False,
        "medium",
    ),
    "the_start_up_checks_refusal_is_not_the_advice": Case(
        "ValueError: Free memory on device cuda:0 (1.53/22.05 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 19.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
        "environment",
        True,  # memory another process holds (E-STARTFREE)
    ),
    "argparse_refusing_the_command_line_is_the_environment": Case(
        "usage: vllm serve <model_tag> [options]\nvllm serve: error: the following arguments are required: model_tag\n",
        "environment",
        False,
    ),
    "a_model_name_that_is_no_repository_id_is_the_environment": Case(
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
        "'/data/models/qwen/'. Use `repo_type` argument if needed.\n",
        "environment",
        False,
    ),
    "the_weight_loading_oom_message_with_an_em_dash": Case(
        "[gpu_model_runner.py:4957] Failed to load model \u2014 not enough GPU memory.\n",
        "weight_loading",
        True,
    ),
    "an_oom_after_the_drafter_starts_loading_is_weight_loading": Case(
        "(Worker_TP0 pid=7) INFO 03-05 18:03:00 [gpu_model_runner.py:3589] Loading drafter model...\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n",
        "weight_loading",
        True,
    ),
    "a_traceback_cut_inside_an_import_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        '  File "<stdin>", line 1, in <module>\n'
        '  File "/venv/lib/python3.12/site-packages/vllm/__init__.py", line 74, in __getattr__\n'
        "    module = import_module(module_name, __package__)\n"
        '  File "/usr/lib/python3.12/importlib/__init__.py", line 90, in import_module\n'
        "    return _bootstrap._gcd_import(name[level:], package, level)\n",
        "environment",
        False,
    ),
    "a_traceback_cut_in_the_frozen_bootstrap_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/models/registry.py", line 379, in '
        "_try_load_model_cls\n"
        '  File "<frozen importlib._bootstrap>", line 1387, in _gcd_import\n'
        '  File "<frozen importlib._bootstrap>", line 488, in _call_with_frames_removed\n',
        "environment",
        False,
    ),
    "a_failure_in_vllms_platform_layer_is_the_environment": Case(
        'File ".../vllm/platforms/interface.py", line 247, in device_id_to_physical_device_id\n'
        "    return int(physical_device_id)\n"
        "ValueError: invalid literal for int() with base 10: 'MIG-4c60d78c-506f-5593-938d-a136eaa1fa52'\n",
        "environment",
        False,
    ),
    "an_excerpt_that_starts_on_the_executors_rpc_call_is_placed_by_its_method": Case(
        '(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700]     output = self.collective_rpc("determine_available_'
        'memory")\n'
        '(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/'
        'v1/executor/multiproc_executor.py", line 243, in collective_rpc\n'
        "(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700]     result = get_response(w, dequeue_timeout)\n"
        '(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/'
        'v1/executor/multiproc_executor.py", line 230, in get_response\n'
        "(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700] RuntimeError: Worker failed with error 'CUDA error: an "
        "illegal memory access was encountered\n",
        "memory_profiling",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session25_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)


def test_a_guessed_oom_phase_says_so_before_its_steps(tmp_path: Path) -> None:
    """A lone OOM line's phase is the likeliest one: the advice says to place it with the whole log first; an OOM that
    vLLM's own message places (E-LOADOOM) gets its phase's steps alone."""
    lone = checked_verdict("lone", CASES["a_lone_oom_line_is_a_requests_prefill_at_low_confidence"], tmp_path)
    assert lone.advice[0] == GUESSED_PHASE and len(lone.advice) > 1
    placed = checked_verdict("placed", CASES["the_weight_loading_oom_message_with_an_em_dash"], tmp_path)
    assert GUESSED_PHASE not in placed.advice
