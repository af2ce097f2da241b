"""Classes of session 24 (issue 13). CPython's multiprocessing refusing how a program starts vLLM's workers (from a
daemonic pool worker, or under spawn from a script without a `__main__` guard) is the environment, as is Transformers'
lookup of a config or tokenizer file that the model's folder lacks ("does not appear to have a file named
config.json"). A name outside the choices an exception lists ("Unknown attention backend: 'ASCEND'. Valid options are:
...") is a refused setting. An exception line set in Markdown bold or as code in a pasted thread ("**ValueError: ...")
is still the exception."""

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
    "a_plain_exception_without_a_choice_list_stays_a_crash": Case(
        "ValueError: max() arg is an empty sequence\n",
        "not_oom_other",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session24_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
