"""The phase knowledge mined from vLLM's source (scripts/gen_vllm_knowledge.py): the checked-in tables
load, real vLLM lines and frames map to their phases, triage uses them, and the tables are not stale
against the vLLM installed here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_LOGS

from oomkit.triage import analyse
from oomkit.triage.knowledge import _tables, frame_phase, known_versions, match_message, match_messages
from oomkit.triage.knowledge_rules import source_frames_phase, template_phase

REPO = Path(__file__).resolve().parent.parent
SP = "/usr/local/lib/python3.12/dist-packages/vllm"


def test_every_minor_release_from_0_6_is_read() -> None:
    versions = known_versions()
    assert versions[0].startswith("0.6.") and "0.32.0" in versions and "0.34.0" in versions
    assert sum(v.startswith("installed-") for v in versions) <= 1


@pytest.mark.parametrize(
    "line,phase,is_oom",
    [
        (
            "ValueError: To serve at least one request with the models's max seq len (4096), (0.14 GiB KV cache is needed, "
            "which is larger than the available KV cache memory (0.09 GiB). Based on the available memory, the estimated "
            "maximum model length is 896. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.",
            "kv_cache_allocation",
            True,
        ),
        (
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering "
            "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
            "memory_profiling",
            True,
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.",
            "kv_cache_allocation",
            True,
        ),
    ],
)
def test_real_messages_map_to_their_phase(line: str, phase: str, is_oom: bool) -> None:
    row = match_message(line)
    assert row is not None, line
    assert (row.phase, row.is_oom) == (phase, is_oom)
    assert row.source.startswith("vllm/") and ":" in row.source and row.versions


def test_unrelated_text_matches_nothing() -> None:
    assert match_message("the quick brown fox jumps over the lazy dog") is None


@pytest.mark.parametrize(
    "path,function,phase",
    [
        (f"{SP}/v1/worker/gpu_model_runner.py", "capture_model", "cudagraph_capture"),
        (f"{SP}/v1/worker/gpu_model_runner.py", "_dummy_sampler_run", "memory_profiling"),
        (f"{SP}/v1/worker/gpu_model_runner.py", "profile_run", "memory_profiling"),
        (f"{SP}/v1/worker/gpu_worker.py", "determine_available_memory", "memory_profiling"),
        (f"{SP}/v1/worker/gpu_model_runner.py", "initialize_kv_cache", "kv_cache_allocation"),
        (f"{SP}/v1/worker/gpu_model_runner.py", "execute_model", "serving"),
    ],
)
def test_frames_map_to_their_phase(path: str, function: str, phase: str) -> None:
    row = frame_phase(path, function)
    assert row is not None and row.phase == phase


def test_a_pynccl_stack_is_network_communication() -> None:
    stack = [
        f"{SP}/v1/worker/gpu_worker.py::init_device",
        f"{SP}/distributed/device_communicators/pynccl.py::__init__",
        f"{SP}/distributed/device_communicators/pynccl_wrapper.py::ncclCommInitRank",
    ]
    assert source_frames_phase(stack) in ("network_communication", "environment")
    assert source_frames_phase(stack[1:]) == "network_communication"


def test_triage_places_a_cut_traceback_by_source_frames(tmp_path: Path) -> None:
    # Constructed in vLLM 0.32's line format: a traceback through the custom all-reduce set-up, cut
    # before its exception line. No hand rule names these frames.
    prefix = "(Worker_TP1 pid=77) ERROR 11-02 10:00:00 [multiproc_executor.py:600] "
    log = tmp_path / "cut.log"
    log.write_text(
        "".join(
            prefix + line + "\n"
            for line in [
                "WorkerProc failed to start.",
                "Traceback (most recent call last):",
                f'  File "{SP}/distributed/device_communicators/custom_all_reduce.py", line 90, in __init__',
                f'  File "{SP}/distributed/device_communicators/all_reduce_utils.py", line 40, in gpu_p2p_access_check',
            ]
        )
    )
    verdict = analyse([str(log)]).verdict
    assert verdict.phase == "network_communication"
    assert verdict.decided_by == "frames"


def test_a_lone_oom_line_is_oom_with_a_phase(tmp_path: Path) -> None:
    log = tmp_path / "lone.log"
    log.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU 0 has a total "
        "capacity of 23.64 GiB of which 100.00 MiB is free.\n"
    )
    verdict = analyse([str(log)]).verdict
    assert verdict.is_oom is True and verdict.phase != "unknown" and verdict.confidence == "low"


def test_cpu_logs_keep_their_verdicts_with_decided_by() -> None:
    verdict = analyse([str(CPU_LOGS / "kv_override_too_small.log")]).verdict
    assert verdict.phase == "kv_cache_allocation" and verdict.decided_by == "template"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the testbed extra)")
def test_tables_are_not_stale_against_the_installed_vllm() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_vllm_knowledge.py"), "--check-installed"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_a_dispatcher_frame_places_nothing() -> None:
    # worker_base.execute_method runs whatever method it is handed: it is reached from every phase.
    assert source_frames_phase([f"{SP}/worker/worker_base.py::execute_method"]) is None


def test_a_cut_traceback_after_a_kv_marker_is_kv_allocation(tmp_path: Path) -> None:
    # Constructed in vLLM 0.4-0.6's V0 Ray format: the cache blocks are counted, then a worker's
    # traceback through the dispatcher is cut before its exception.
    prefix = "(RayWorkerWrapper pid=7) ERROR 06-28 06:11:45 worker_base.py:145] "
    log = tmp_path / "kv.log"
    log.write_text(
        "INFO 06-28 06:11:45 distributed_gpu_executor.py:45] # GPU blocks: 378, # CPU blocks: 1638\n"
        + prefix
        + "Traceback (most recent call last):\n"
        + prefix
        + f'  File "{SP}/worker/worker_base.py", line 137, in execute_method\n'
    )
    verdict = analyse([str(log)]).verdict
    assert verdict.phase == "kv_cache_allocation" and verdict.decided_by == "marker"


def test_an_oom_in_model_execution_is_serving(tmp_path: Path) -> None:
    # Constructed in V0's format: the model runner dumps the failed batch, then reports the OOM.
    log = tmp_path / "serve.log"
    log.write_text(
        "INFO 12-19 09:33:44 model_runner_base.py:120] Writing input of failed execution to /tmp/x.pkl...\n"
        "ERROR 12-19 09:33:44 engine.py:135] OutOfMemoryError('Error in model execution (input dumped to /tmp/x.pkl): "
        "CUDA out of memory. Tried to allocate 524.00 MiB. GPU 0 has a total capacity of 15.77 GiB')\n"
    )
    verdict = analyse([str(log)]).verdict
    assert verdict.phase.startswith("serving_") and verdict.is_oom and verdict.decided_by == "template"


def test_a_lone_wrapper_is_unknown_not_a_guess(tmp_path: Path) -> None:
    # Constructed from the V1 API server's wrapper line: the root cause above it is not in the log.
    log = tmp_path / "wrapper.log"
    log.write_text(
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}\n"
    )
    verdict = analyse([str(log)]).verdict
    assert (verdict.phase, verdict.is_oom, verdict.confidence) == ("unknown", False, "low")


def _mined(tmp_path: Path, module: str, source: str) -> list:
    """The templates the generator mines from one module of a release tree made here."""
    sys.path.insert(0, str(REPO / "scripts"))
    from vllm_knowledge.extract import read_release

    path = tmp_path / module
    path.parent.mkdir(parents=True)
    path.write_text(source)
    templates, _functions = read_release(tmp_path)
    return templates


def test_an_assert_message_is_mined_as_an_assertion_error(tmp_path: Path) -> None:
    # `assert cond, msg` raises AssertionError(msg): the generator keeps its message as it keeps a raise's
    templates = _mined(
        tmp_path,
        "vllm/worker.py",
        "def determine_available_memory(free, total):\n"
        '    assert free < total, f"Error in memory profiling. Initial free memory {free} GiB, current {total}"\n'
        "    assert free\n",
    )
    assert [(t.exception, t.function) for t in templates] == [("AssertionError", "determine_available_memory")]
    assert templates[0].literal[0] == "Error in memory profiling. Initial free memory "


def test_a_real_assertion_maps_to_the_function_that_asserts() -> None:
    # vLLM 0.7-0.8's V1 worker (Worker.determine_available_memory) asserts that profiling freed no memory
    line = (
        "AssertionError: Error in memory profiling. Initial free memory 30.3 GiB, current free memory 30.5 GiB. "
        "This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance."
    )
    row = match_message(line)
    assert row is not None and row.exception == "AssertionError"
    assert (row.phase, row.is_oom) == ("memory_profiling", False)
    assert row.source.endswith(":Worker.determine_available_memory")


def test_a_modules_own_name_stays_in_its_message(tmp_path: Path) -> None:
    # PEP 562's module __getattr__ raises "module {__name__!r} has no attribute {name!r}": the generator keeps the
    # module's name (and `__package__`), so the template is that module's alone
    templates = _mined(
        tmp_path,
        "vllm/distributed/nixl_utils.py",
        "def __getattr__(name):\n"
        '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")\n'
        "def load(name):\n"
        '    raise ImportError(f"module {__package__} cannot load the plugin {name} in its own code")\n',
    )
    literals = sorted(t.literal[0] for t in templates)
    assert literals == [
        "module 'vllm.distributed.nixl_utils' has no attribute ",
        "module vllm.distributed cannot load the plugin ",
    ]


def test_another_modules_missing_attribute_is_placed_by_no_vllm_module_template() -> None:
    # CPython prints the same words for any module: a checkpoint's remote code is none of vLLM's modules, so no
    # module's own template (vllm/distributed/nixl_utils.py's, the network) places it
    line = "AttributeError: module 'transformers_modules.jinaai.modeling_xlm_roberta' has no attribute 'XLMRoberta'"
    assert template_phase(line) is None


def test_a_message_is_mined_as_the_line_it_prints(tmp_path: Path) -> None:
    # Triage reads a log line by line, and log writers and pastes drop a line's trailing whitespace: a message
    # that ends in a space or holds a newline is matched on the printed line, not on text no line can hold
    templates = _mined(
        tmp_path,
        "vllm/worker.py",
        "def select_block(size):\n"
        '    raise ValueError(f"No common block size for {size}. ")\n'
        "def choose_kernel(reasons):\n"
        '    raise ValueError("Failed to find a kernel for the layer. Reasons: \\n" + reasons)\n'
        "def verify(task):\n"
        '    raise ValueError(f"""\\n        pooling_task required for `LLM.encode`.\\n        Use {task}.""")\n',
    )
    patterns = {t.function: t.pattern for t in templates}
    assert patterns == {
        "select_block": r"No\ common\ block\ size\ for\ .*?\.",
        "choose_kernel": r"Failed\ to\ find\ a\ kernel\ for\ the\ layer\.\ Reasons:",
        "verify": r"pooling_task\ required\ for\ `LLM\.encode`\.",
    }


@pytest.mark.parametrize(
    ("line", "phase", "function"),
    [
        # vLLM 0.11-0.34: no attention kernel takes the KV manager's block size (raised while the KV cache is set up)
        ("ValueError: No common block size for 128.", "kv_cache_allocation", "select_common_block_size"),
        # vLLM 0.7-0.34: the quantized layer's kernel is chosen while the model is built; the reasons follow on
        # the next lines
        (
            "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons:",
            "weight_loading",
            "choose_mp_linear_kernel",
        ),
        # vLLM 0.6.4-0.7: the V0 worker's profiling summary, whose second line starts with "the current vLLM
        # instance can use"
        (
            "INFO 01-20 10:00:00 worker.py:232] Memory profiling takes 4.55 seconds",
            "memory_profiling",
            "Worker.determine_num_available_blocks",
        ),
    ],
)
def test_a_real_printed_line_matches_its_template(line: str, phase: str, function: str) -> None:
    rows = match_messages(line)
    assert rows, line
    assert any(row.phase == phase and row.source.endswith(":" + function) for row in rows), rows


def test_no_mined_pattern_holds_a_newline() -> None:
    # A pattern with a newline could never match one log line (the generator keeps one printed line per message)
    assert not [row.id for row in _tables().messages if "\n" in row.pattern]
