"""Classes of session 20 (issue 13). A traceback frame whose `line N, in func` a paste spread with runs of spaces
(GitHub's rendering of a hard-wrapped terminal copy) is still a frame, so a cut traceback through the weights'
post-processing is weight loading. The second paragraph of Transformers' refusal of an unknown model type ("You can
update Transformers with the command ..."), on a line of its own, is the environment. FastChat's
log format ("date | ERROR | stderr | <line>") is a wrapper around vLLM's lines, and a wrapper reading an attribute vLLM's
engine object no longer has (FastChat's worker reading `.engine` of V1's AsyncLLM) is the environment: the wrapper was
built for another vLLM."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

WORKER = "ERROR 03-22 06:48:14 [worker_base.py:620] "
SITE = "/usr/local/lib/python3.12/dist-packages/vllm"

CASES = {
    "a_frame_spread_by_spaces_is_still_a_frame": Case(
        f"{WORKER}    _process_weights_after_loading(model, model_config, target_device)\n"
        f'{WORKER}  File "{SITE}/attention/backends/mla/common.py", line 1101,                       in '
        "process_weights_after_loading\n"
        f"{WORKER}    kv_b_proj_weight = get_and_maybe_dequant_weights(self.kv_b_proj).T\n"
        f'{WORKER}  File "{SITE}/attention/backends/mla/common.py", li\n',
        "weight_loading",
        False,
        "low",
    ),
    "transformers_advice_to_upgrade_is_the_environment": Case(
        "ERROR 03-20 10:37:00 engine.py:389] You can update Transformers with the command `pip install --upgrade "
        "transformers`. If this does not work, and the checkpoint is very new, then there may not be a release "
        "version that supports this model yet.\n"
        "Process SpawnProcess-1:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 794, '
        "in __getitem__\n"
        "    raise KeyError(key)\n"
        "KeyError: 'gemma3'\n",
        "environment",
        False,
        "high",
    ),
    "a_wrapper_reading_an_engine_attribute_vllm_dropped_is_the_environment": Case(
        "".join(
            f"2025-03-24 22:04:27 | ERROR | stderr | {line}\n"
            for line in (
                "Traceback (most recent call last):",
                '  File "/p/FastChat/fastchat/serve/vllm_worker.py", line 291, in <module>',
                "    worker = VLLMWorker(",
                '  File "/p/FastChat/fastchat/serve/vllm_worker.py", line 57, in __init__',
                "    self.tokenizer = llm_engine.engine.tokenizer",
                "AttributeError: 'AsyncLLM' object has no attribute 'engine'",
            )
        ),
        "environment",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session20_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
