"""Classes of session 14 (issue 13). An exception that no frame, marker or mined template places, worded as a
refusal of a setting, a device count or a platform feature ("is not supported", "only supports", "is not
applicable in headless mode", "Insufficient devices", "N is not divisible by M", "Please try ..."), raised before
the engine served, is the launch being refused: the environment (settings and installation), confidence low. After
the server was ready the same wording is a crash while serving, and an exception worded otherwise stays a crash."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

CORE = "(EngineCore_DP0 pid=289) ERROR 09-27 14:03:50 [core.py:712] "
READY = (
    "INFO 06-16 09:49:10 [launcher.py:29] Route: /v1/chat/completions, Methods: POST\n"
    "INFO:     Application startup complete.\n"
)

CASES = {
    "headless_mode_refuses_a_setting": Case(
        "ValueError: data_parallel_rank is not applicable in headless mode\n", "environment", False, "low"
    ),
    "platform_finds_too_few_devices": Case(
        f"{CORE}ValueError: Insufficient devices for 2D mesh: found 1, expected 8 for mesh shape (1, 8).\n",
        "environment",
        False,
        "low",
    ),
    "loader_refuses_tensor_parallelism": Case(
        "ValueError: Prequant BitsAndBytes models with tensor parallelism is not supported. "
        "Please try with pipeline parallelism.\n",
        "environment",
        False,
        "low",
    ),
    "block_sizes_that_do_not_divide": Case(
        "ValueError: None of the kernel sizes [128] can divide physical block size 16 evenly\n",
        "environment",
        False,
        "low",
    ),
    "a_refusal_while_serving_is_a_crash": Case(
        READY + f"{CORE}NotImplementedError('The CPU backend currently does not support MoE.')\n",
        "not_oom_other",
        False,
    ),
    "an_exception_not_worded_as_a_refusal_stays_a_crash": Case(
        "TypeError: 'NoneType' object is not callable\n", "not_oom_other", False, "low"
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session14_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
