"""Classes of session 28 (issue 13). PyTorch's lazy device initialisation refusing a forked child of a process that
already opened the device is the environment for every backend that keeps torch's guard and wording ("Cannot
re-initialize NPU in forked subprocess", as CUDA's). CANN's graph engine failing to start when torch_npu first sets
its compile options ("GEInitialize failed", "GELib::InnerInitialize failed") is the environment: the toolkit's install
or its environment, before any model runs. CUDA refusing a kernel binary it is handed ("device kernel image is
invalid", Triton's driver loading a cubin built for another architecture or driver) is the environment, inside a
graph compilation too. A traceback whose innermost vLLM frames are module bodies was raised while
vLLM was being imported, whatever ran below them (a library's decorator), so it is the environment, even through the
grammar packages that otherwise place a failure in serving."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

E = "ERROR 08-14 09:42:11 engine.py:400] "

CASES = {
    "an_npu_reinitialised_in_a_forked_child_is_the_environment": Case(
        "multiproc_worker_utils.py:242] RuntimeError: Cannot re-initialize NPU in forked subprocess. To use NPU with "
        "multiprocessing, you must use the 'spawn' start method.\n",
        "environment",
        False,
    ),
    "an_xpu_reinitialised_in_a_forked_child_is_the_environment": Case(
        "RuntimeError: Cannot re-initialize XPU in forked subprocess. To use XPU with multiprocessing, you must use "
        "the 'spawn' start method\n",
        "environment",
        False,
    ),
    "canns_graph_engine_failing_to_start_is_the_environment": Case(
        f"{E}SetPrecisionMode:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:155 NPU function error: "
        "at_npu::native::AclSetCompileopt(aclCompileOpt::ACL_PRECISION_MODE, precision_mode), error code is 500001\n"
        f"{E}[ERROR] 2025-08-14-09:42:11 (PID:7401, Device:0, RankID:-1) ERR00100 PTA call acl api failed\n"
        f"{E}E19999: [PID: 7401] 2025-08-14-09:42:11.573.461 GELib::InnerInitialize failed.[FUNC:Initialize]"
        "[FILE:gelib.cc][LINE:164]\n"
        f"{E}GEInitialize failed.[FUNC:GEInitialize][FILE:ge_api.cc][LINE:382]\n",
        "environment",
        False,
    ),
    "an_invalid_kernel_image_is_the_environment_inside_a_compilation": Case(
        "torch._dynamo.exc.BackendCompilerFailed: backend='<vllm.compilation.backends.VllmBackend object at "
        "0x7f576a36a9f0>' raised:\n"
        "RuntimeError: Triton Error [CUDA]: device kernel image is invalid\n",
        "environment",
        False,
    ),
    "a_traceback_cut_while_importing_vllms_grammar_modules_is_the_environment": Case(
        "Traceback (most recent call last):\n"
        + "".join(
            f'  File "/usr/local/lib/python3.10/dist-packages/{path}", line 15, in <module>\n    from x import y\n'
            for path in (
                "vllm/entrypoints/llm.py",
                "vllm/model_executor/guided_decoding/__init__.py",
                "vllm/model_executor/guided_decoding/outlines_logits_processors.py",
                "outlines/fsm/regex.py",
            )
        )
        + '  File "/usr/local/lib/python3.10/dist-packages/numba/core/decorators.py", line 225, in wrapper\n'
        "    disp.enable_caching()\n",
        "environment",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session28_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
