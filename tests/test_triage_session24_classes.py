"""Classes of session 24 (issue 13). CPython's multiprocessing refusing how a program starts vLLM's workers (from a
daemonic pool worker, or under spawn from a script without a `__main__` guard) is the environment, as is Transformers'
lookup of a config or tokenizer file that the model's folder lacks ("does not appear to have a file named
config.json"). A name outside the choices an exception lists ("Unknown attention backend: 'ASCEND'. Valid options are:
...") is a refused setting. An exception line set in Markdown bold or as code in a pasted thread ("**ValueError: ...")
is still the exception, as is one in pytest's report of a failing test ("E       AssertionError: ..."). The Hub
refusing or failing to serve the model's files (a gated repository without a token, no network or TLS to
huggingface.co, offline mode with nothing cached) is the environment, in its raised forms only: the Hub client's logged
retries and vLLM's "Error retrieving safetensors" are not failures on their own. Apple Metal failing a command buffer
for lack of memory, as MLX (vllm-metal's array library) raises it, is an out-of-memory line (alone, it gets the lone
OOM's likeliest phase at low confidence), and libtpu unable to open a TPU that another process holds is the
environment."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

CASES = {
    "a_daemonic_pool_worker_starting_vllm_is_the_environment": Case(
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 118, in start\n'
        "    assert not _current_process._config.get('daemon'), \\\n"
        "AssertionError: daemonic processes are not allowed to have children\n",
        "environment",
        False,
    ),
    "a_spawned_script_without_a_main_guard_is_the_environment": Case(
        "RuntimeError:\n"
        "        An attempt has been made to start a new process before the\n"
        "        current process has finished its bootstrapping phase.\n",
        "environment",
        False,
    ),
    "a_model_folder_without_its_config_file_is_the_environment": Case(
        "OSError: /root/models/Pixtral does not appear to have a file named config.json. Checkout "
        "'https://huggingface.co//root/models/Pixtral/tree/None' for available files.\n",
        "environment",
        False,
    ),
    "a_name_outside_the_listed_choices_is_a_refused_setting": Case(
        "(APIServer pid=15833) ValueError: Unknown attention backend: 'ASCEND'. Valid options are: FLASH_ATTN, "
        "TRITON_ATTN, XFORMERS, ROCM_ATTN, TORCH_SDPA, FLASHINFER\n",
        "environment",
        False,
    ),
    "an_exception_in_markdown_bold_is_the_exception": Case(
        "(VllmWorker rank=1 pid=3457224) **ValueError: Sliding window for some but all layers is not supported. This "
        "model uses sliding window but `max_window_layers` = 64 is less than `num_hidden_layers` = 64.**\n",
        "environment",
        False,
    ),
    "bold_text_that_names_no_exception_places_nothing": Case(
        "**Note**: the server printed nothing after this line\n",
        "unknown",
        False,
    ),
    "a_gated_repository_without_a_token_is_the_environment": Case(
        "OSError: You are trying to access a gated repo.\n"
        "Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B.\n"
        "401 Client Error. (Request ID: Root=1-66)\n"
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.\n",
        "environment",
        False,
    ),
    "the_hub_unreachable_for_the_model_config_is_the_environment": Case(
        "requests.exceptions.ConnectTimeout: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max "
        "retries exceeded with url: /Qwen/Qwen2.5-7B-Instruct/resolve/main/config.json (Caused by "
        "ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at 0x7f>, 'Connection to huggingface.co timed "
        "out. (connect timeout=10)'))\"), '(Request ID: 1)')\n",
        "environment",
        False,
    ),
    "a_retried_hub_request_is_no_failure": Case(
        "WARNING 09-02 01:27:50 [_http.py:301] '(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
        "Max retries exceeded with url: /Qwen/Qwen3-8B/resolve/main/config.json\"))' thrown while requesting HEAD "
        "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json. Retrying in 1s [Retry 1/5].\n"
        '(APIServer pid=2468433) ERROR 09-02 01:27:54 [config.py:124] Error retrieving safetensors: (MaxRetryError("'
        "HTTPConnectionPool(host='127.0.0.1', port=80): Max retries exceeded with url: /Qwen/Qwen3-8B/resolve/main/"
        'model.safetensors.index.json"))\n',
        "unknown",
        False,
    ),
    "an_exception_in_a_pytest_report_is_the_exception": Case(
        "    def test_priority_scheduling():\n"
        ">       scheduler.schedule()\n"
        "E       AssertionError: scheduled_new_reqs: 0 + scheduled_resumed_reqs: 0 + scheduled_running_reqs: 2 > "
        "running: 1\n"
        "../vllm/v1/core/sched/scheduler.py:558: AssertionError\n",
        "not_oom_other",
        False,
    ),
    "metal_running_out_of_memory_is_an_oom_line": Case(
        "[error] libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
        "execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n",
        "serving_prefill",
        True,
        "low",
    ),
    "a_tpu_another_process_holds_is_the_environment": Case(
        "RuntimeError: Bad StatusOr access: UNKNOWN: TPU initialization failed: open(/dev/vfio/0): Device or resource "
        "busy: Device or resource busy; Couldn't open iommu group /dev/vfio/0\n",
        "environment",
        False,
    ),
    "a_plain_exception_without_a_choice_list_stays_a_crash": Case(
        "ValueError: max() arg is an empty sequence\n",
        "not_oom_other",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session24_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
