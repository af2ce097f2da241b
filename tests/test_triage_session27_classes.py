"""Classes of session 27 (issue 13). Ascend's graph capture asserting on its capture status ("status ==
aclmdlRICaptureStatus::ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE INTERNAL ASSERT FAILED") is graph capture. CANN without a
compiled kernel binary for an operator on this chip ("Cannot find binary for op ..."), or with a kernel package whose
dynamic kernel configs it cannot parse, is the environment, as CUDA's "no kernel image" is. A traceback cut where a
platform plugin (vllm_ascend/platform.py) or torch binds the process to its device (torch.cuda.set_device,
torch.npu.set_device) is the environment: the driver or runtime refused the device. A traceback through the code of a
request's grammar (guided decoding, structured output) is serving, whichever start-up marker an excerpt kept last;
the grammar manager's constructor, which the engine runs at start-up, is not."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

E = "ERROR 02-11 11:32:58 engine.py:389] "
W = "(Worker_TP0 pid=3311) ERROR 08-12 01:31:20 [multiproc_executor.py:932] "
KV_SIZED = (
    "INFO 03-30 01:59:44 [worker.py:267] model weights take 6.74GiB; non_torch_memory takes 0.11GiB; PyTorch activation "
    "peak memory takes 1.66GiB; the rest of the memory reserved for KV Cache is 3.88GiB.\n"
)

CASES = {
    "ascends_capture_status_assert_is_graph_capture": Case(
        "ERROR 08-12 01:31:20 [core.py:586] RuntimeError: status == aclmdlRICaptureStatus::"
        'ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE INTERNAL ASSERT FAILED at "build/CMakeFiles/torch_npu.dir/'
        'compiler_depend.ts":162, please report a bug to PyTorch.\n',
        "cudagraph_capture",
        False,
    ),
    "cann_without_a_kernel_binary_for_an_op_is_the_environment": Case(
        f"{E}call aclnnPromptFlashAttentionV3 failed, detail:EZ1001: PromptFlashAttention LaunchAicore failed.\n"
        f"{E}        Cannot find binary for op PromptFlashAttention.\n",
        "environment",
        False,
    ),
    "cann_unable_to_parse_its_kernel_configs_is_the_environment": Case(
        "(EngineCore_DP0 pid=3473945) ERROR 12-10 10:52:09 [patch_core.py:58] EZ9999[PID: 3473945] "
        "AclNN_Inner_Error(EZ9999):  Parse dynamic kernel config fail.\n",
        "environment",
        False,
    ),
    "a_traceback_cut_in_a_platform_plugins_set_device_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/site-packages/vllm_ascend/worker/worker.py", line 164, in init_device\n'
        "    NPUPlatform.set_device(self.device)\n"
        '  File "/usr/local/lib/python3.10/site-packages/vllm_ascend/platform.py", line 103, in set_device\n'
        "    torch.npu.set_device(device)\n",
        "environment",
        False,
        "low",
    ),
    "a_traceback_cut_in_torchs_set_device_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/site-packages/torch_npu/npu/utils.py", line 83, in set_device\n'
        "    torch_npu._C._npu_setDevice(device_id)\n",
        "environment",
        False,
        "low",
    ),
    "a_requests_grammar_in_the_frames_is_serving_after_start_up_markers": Case(
        KV_SIZED + f"{E}Traceback (most recent call last):\n"
        f'{E}  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/guided_decoding/xgrammar_decoding.py",'
        " line 355, in __call__\n"
        f"{E}    assert self.matchers[i].accept_token(sampled_token)\n"
        f"{E}AssertionError\n",
        "not_oom_other",
        False,
    ),
    "the_grammar_managers_constructor_is_start_up": Case(
        KV_SIZED + f"{W}Traceback (most recent call last):\n"
        f'{W}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/structured_output/__init__.py", line 40, in __init__\n'
        f"{W}    self.tokenizer = init_tokenizer_from_configs(model_config=self.vllm_config.model_config)\n"
        f"{W}AssertionError\n",
        "kv_cache_allocation",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session27_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
