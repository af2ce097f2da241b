"""Classes of session 11 (issue 13). The decision order's third step for exceptions: an exception that no frame
or marker places is placed by the template vLLM raises it from (scripts/gen_vllm_knowledge.py's message table);
the same message raised in several places counts only when the places agree, and what vLLM's configuration
raises while it builds the engine's settings (vllm/config*, arg_utils, the model registry's refusal) is the
environment. A reporter's Markdown quote ("> ValueError: ...") and torch.distributed's per-rank prefix
("[rank0]: ...") come before the text, like a wrapper. A checkpoint tensor the model has no parameter for
(load_weights' `params_dict[name]`: "KeyError: 'layers.21.mlp.gate_up_proj.weight'") fails weight loading.
torch's Module.to(device) walk (`_apply`, `convert`) is the model moved onto the device while loading. Dynamo's
closing line ("Set TORCHDYNAMO_VERBOSE=1 ...") is a compile error, and a compile error before the server is
ready is the compile-and-capture step."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames, verdict_of

from oomkit.logs.line import parse_line
from oomkit.triage.knowledge_rules import template_phase

WORKER = "(RayWorkerWrapper pid=22) ERROR 04-24 16:06:40 worker_base.py:157] "
CASES = {
    # Marlin's shape check, raised on the weight-loading path, is worded as a refusal of the tensor-parallel size: since
    # session 29 the refusal's wording comes before the mined template's phase (session 11 read it as weight loading)
    "marlin_shape_refusal": Case(
        "ValueError: Weight input_size_per_partition = 10944 is not divisible by min_thread_k = 128. Consider reducing "
        "tensor_parallel_size or running with --quantization gptq.\n",
        "environment",
        False,
        "low",
    ),
    # a message raised on the weight-loading path in no refusal's words: its template places it
    "kernel_choice_template": Case(
        "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n",
        "weight_loading",
        False,
        "low",
    ),
    # (session 11 used the capability check, "is not supported for the current GPU", which a hand rule names since
    # session 13: tests/test_triage_session13_classes.py)
    "quantization_capability_refusal": Case(
        "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]\n",
        "environment",
        False,
        "low",
    ),
    # a message no vLLM release raises: the template step has nothing to say
    "unknown_message_stays_unplaced": Case(
        "ValueError: max() arg is an empty sequence\n", "not_oom_other", False, "low"
    ),
    "quoted_architecture_refusal": Case(
        ">ValueError: Model architectures ['MiniCPM3Model'] are not supported for now. Supported architectures: "
        "['MiniCPM3ForCausalLM', 'AquilaModel']\n",
        "environment",
        False,
    ),
    "rank_prefixed_parameter_key_error": Case(
        "[rank0]: KeyError: 'layers.21.mlp.gate_up_proj.weight'\n", "weight_loading", False, "high"
    ),
    "quantized_parameter_key_error": Case(
        "KeyError: 'model.layers.55.mlp.experts.w2_weight_scale_inv'\n", "weight_loading", False
    ),
    # a request id is not a parameter
    "request_id_key_error": Case("KeyError: 'chatcmpl-2fdd35648efc418db366c6690c29c4da'\n", "not_oom_other", False),
    "module_to_device_cut": Case(
        frames(
            WORKER,
            ("vllm/worker/worker_base.py", "execute_method", "return executor(*args, **kwargs)"),
            ("torch/nn/modules/module.py", "_apply", "module._apply(fn)"),
            ("torch/nn/modules/module.py", "convert", "return t.to(device, dtype, non_blocking)"),
        )
        + "[...]\n",
        "weight_loading",
        False,
    ),
    "dynamo_closing_line": Case(
        "ERROR 06-08 16:01:38 [core.py:515] Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this "
        'especially if you\'re reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"\n',
        "cudagraph_capture",
        False,
        "low",
    ),
    "compile_error_after_ready_is_a_crash": Case(
        "(APIServer pid=7) INFO 11-04 12:20:01 [api_server.py:1520] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "(EngineCore_DP0 pid=9) ERROR 11-04 12:30:01 [core.py:700] torch._dynamo.exc.BackendCompilerFailed: "
        "backend='inductor' raised: AssertionError\n",
        "not_oom_other",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session11_class(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    verdict = checked_verdict(name, case, tmp_path)
    if name.endswith("_template"):
        assert verdict.decided_by == "template"
        assert "vLLM raises this message in vllm/" in verdict.confidence_reason
    if name in ("marlin_shape_refusal", "quantization_capability_refusal"):
        assert verdict.decided_by == "template"
        assert "worded as a refusal of a setting" in verdict.confidence_reason


def test_places_that_disagree_place_nothing() -> None:
    """Marlin's shape check is on the weight-loading path; bitblas' copy of the same message is on no phase's path:
    the one place with a phase decides. A message raised only on no phase's path places nothing."""
    phase, row = template_phase(
        "Weight input_size_per_partition = 8 is not divisible by min_thread_k = 128. "
        "Consider reducing tensor_parallel_size or running with --quantization gptq."
    ) or (None, None)
    assert phase == "weight_loading" and row is not None and "marlin" in row.source
    assert template_phase("max() arg is an empty sequence") is None


@pytest.mark.parametrize(
    ("line", "proc", "msg"),
    [
        ("[rank3]: Traceback (most recent call last):", "rank3", "Traceback (most recent call last):"),
        ("> > ValueError: boom", None, "ValueError: boom"),
        (">>> import vllm", None, "import vllm"),
        (
            "[rank0]:[W324 10:53:37.985 ProcessGroupNCCL.cpp:1250] Warning: x",
            "rank0",
            "[W324 10:53:37.985 ProcessGroupNCCL.cpp:1250] Warning: x",
        ),
    ],
)
def test_quote_and_rank_prefixes_are_peeled(line: str, proc: str | None, msg: str) -> None:
    record = parse_line(line)
    assert (record.proc, record.msg) == (proc, msg)
    assert record.text == line  # the evidence keeps the line as written


ENV_AND_OOM_LINES = {
    # a Triton kernel's tile configuration needs more shared memory than this GPU has
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 263168, Hardware limit: 232448. "
    "Reducing block sizes or `num_stages` may help.": ("environment", False),
    "(EngineCore_DP0 pid=160843) ERROR 03-05 12:36:31 [core.py:1006] hip runtime failed to load.": (
        "environment",
        False,
    ),
    "Some attention backends are not valid for cuda with AttentionSelectorConfig(head_size=64, has_sink=True). "
    "Reasons: {FLASH_ATTN: [sink setting not supported]}": ("environment", False),
    "(EngineCore pid=9) jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:": (
        "serving_prefill",
        True,
    ),
    "ERROR 06-19 17:19:27 [engine.py:163] RuntimeError('TT_THROW @ bank_manager.cpp:141: tt::exception info: Out of "
    "Memory: Not enough space to allocate 268435456 B DRAM buffer across 12 banks')": ("serving_prefill", True),
}


@pytest.mark.parametrize("line", sorted(ENV_AND_OOM_LINES))
def test_platform_lines(line: str, tmp_path: Path) -> None:
    """A lone out-of-memory line on any platform is memory, in the likeliest phase (`low`)."""
    verdict = verdict_of("line", Case(line + "\n", *ENV_AND_OOM_LINES[line]), tmp_path)
    assert (verdict.phase, verdict.is_oom) == ENV_AND_OOM_LINES[line]


@pytest.mark.parametrize(
    ("line", "pid", "msg"),
    [
        (
            "[36m(RayWorkerWrapper pid=858)[0m INFO 04-16 11:52:45 [gpu_model_runner.py:1626] Graph capturing finished",
            858,
            "Graph capturing finished",
        ),
        ("[1;36m(EngineCore_DP0 pid=1)[0;0m ERROR 04-16 11:52:45 [core.py:1] boom", 1, "boom"),
        ("#033[2m#033[33m(raylet)#033[0m boom", None, "(raylet) boom"),
    ],
)
def test_colour_codes_without_their_escape_byte_are_peeled(line: str, pid: int | None, msg: str) -> None:
    """A copy that lost the ESC byte of each colour code, or syslog's "#033" for it, keeps vLLM's header readable."""
    record = parse_line(line)
    assert (record.pid, record.msg) == (pid, msg)


FORK = "/home/me/vllm-gptq/vllm/engine/llm_engine.py"  # 0.2's layout: _init_workers_ray lived in the engine


def test_a_step_root_is_known_by_name_in_a_module_the_table_lacks() -> None:
    """vLLM's source roots Ray worker set-up at `_init_workers_ray` in every release that has it (the executors,
    0.6-0.x); in 0.2's llm_engine.py, or a fork, the name alone places the frame. Generic names do not."""
    from oomkit.triage.knowledge import frame_phase

    row = frame_phase(FORK, "_init_workers_ray")
    assert row is not None and row.phase == "network_communication"
    old_module = "/home/me/vllm-gptq/vllm/worker/old_worker.py"
    assert frame_phase(old_module, "profile_run") is not None
    assert frame_phase(old_module, "step") is None
    assert frame_phase(old_module, "_init_executor") is None
    assert frame_phase("/home/me/app.py", "_init_workers_ray") is None  # not a vLLM module


@pytest.mark.parametrize(
    ("frame", "phase"),
    [
        ("torch/_dynamo/convert_frame.py::_compile", "cudagraph_capture"),
        ("torch/_dynamo/symbolic_convert.py::inline_user_function_return", "cudagraph_capture"),
        ("torch/_dynamo/eval_frame.py::_fn", None),  # running compiled code: every serving step does
    ],
)
def test_dynamo_translating_a_frame_is_compile(frame: str, phase: str | None) -> None:
    from oomkit.triage.stack import stack_phase

    assert stack_phase([f"/usr/lib/python3.12/site-packages/{frame}"]) == phase


NETWORK_AND_CRASH_LINES = {
    "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 2 Rank 1] Heartbeat monitor timed out! Process will be terminated "
    "after dumping debug info.": "network_communication",
    "E0904 21:29:13.608029 31963 transfer_task.cpp:469] Failed to open segment 192.168.10.12:12516": (
        "network_communication"
    ),
    "E0417 19:46:42.567027   481 master_client.cpp:192] Failed to mount segment due to rpc error": (
        "network_communication"
    ),
    "(APIServer pid=396) zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.27.91.102:13345')": (
        "network_communication"
    ),
    "(EngineCore_DP0 pid=89) ERROR 04-20 18:08:14 [core.py:1100] ValueError: Cannot provide a placement group "
    "requiring 4.0 GPUs (placement_group_specs=[{'GPU': 1.0}]) within 1800 seconds.": "network_communication",
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:402: masked_scatter_size_check: block: [0,0,0], thread: "
    "[0,0,0] Assertion totalElements <= srcSize failed.": "not_oom_other",
}


@pytest.mark.parametrize("line", sorted(NETWORK_AND_CRASH_LINES))
def test_network_and_crash_lines(line: str, tmp_path: Path) -> None:
    """PyTorch's NCCL heartbeat monitor, Mooncake's transfer engine and store, a socket bound to another host's
    address, the newer placement-group wording: the network. A CUDA device-side assert with its backticks lost: a
    crash."""
    verdict = verdict_of("line", Case(line + "\n", NETWORK_AND_CRASH_LINES[line], False), tmp_path)
    assert (verdict.phase, verdict.is_oom) == (NETWORK_AND_CRASH_LINES[line], False)


KV_SIZED = (
    "INFO 04-25 10:23:33 [kv_cache_utils.py:634] GPU KV cache size: 106,640 tokens\n"
    "INFO 04-25 10:23:33 [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 13.02x\n"
)
WORKER_ERR = "(VllmWorker rank=0 pid=5337) ERROR 04-25 10:24:22 [multiproc_executor.py:380] "


@pytest.mark.parametrize(
    ("calls", "phase"),
    [
        # the compiled model runs after the pool was sized: warm-up and capture
        (
            [
                ("torch/_dynamo/eval_frame.py", "_fn", "return fn(*args, **kwargs)"),
                ("torch/fx/graph_module.py", "__call__", "raise e"),
            ],
            "cudagraph_capture",
        ),
        # no forward pass in the frames: the pool's own allocation, as the last marker says
        ([("torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)")], "kv_cache_allocation"),
    ],
)
def test_a_forward_pass_after_the_pool_is_sized_is_the_warm_up(calls: list, phase: str, tmp_path: Path) -> None:
    log = KV_SIZED + frames(WORKER_ERR, *calls) + "[...]\n"
    verdict = verdict_of("kv_then_forward", Case(log, phase, False), tmp_path)
    assert verdict.phase == phase


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Worker failed with error ''_OpNamespace' '_moe_C' object has no attribute "
        "'moe_align_block_size'', please check the stack trace above for the root cause",
        "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', "
        "'fp8e5')\")', please check the stack trace above for the root cause",
        "RuntimeError: Currently, block scaled fp8 gemm is not implemented for Blackwell",
    ],
)
def test_builds_that_lack_an_op_or_a_gpu_generation_are_the_environment(line: str, tmp_path: Path) -> None:
    verdict = verdict_of("line", Case(line + "\n", "environment", False), tmp_path)
    assert (verdict.phase, verdict.is_oom) == ("environment", False)


def test_a_quantization_method_built_for_a_layer_is_weight_loading(tmp_path: Path) -> None:
    log = (
        frames(
            "(EngineCore_DP0 pid=109) ERROR 11-06 06:17:47 [core.py:784] ",
            (
                "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py",
                "get_moe_method",
                "return CompressedTensorsWNA16MarlinMoEMethod(",
            ),
            ("vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py", "__init__", "x"),
        )
        + "[...]\n"
    )
    verdict = verdict_of("quant_method", Case(log, "weight_loading", False), tmp_path)
    assert verdict.phase == "weight_loading"


def test_a_condensed_traceback_is_read_by_file_name(tmp_path: Path) -> None:
    """A traceback shortened to "file.py:N, in func" lines: the frames are vLLM's by their file's name."""
    log = (
        "gpu_model_runner.py:5121, in _get_prompt_logprobs_dict\n"
        "    logits = self.model.compute_logits(prompt_hidden_states)\n...\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.82 GiB.\n"
    )
    verdict = verdict_of("condensed", Case(log, "serving_prefill", True), tmp_path)
    assert (verdict.phase, verdict.is_oom) == ("serving_prefill", True)
    # a bare name that is not a vLLM module places nothing
    from oomkit.triage.knowledge import frame_phase

    assert frame_phase("my_script.py", "_get_prompt_logprobs_dict") is None
