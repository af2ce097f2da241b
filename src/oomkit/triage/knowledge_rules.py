"""Triage rules drawn from the knowledge mined from vLLM's source (`oomkit.triage.knowledge`): the
phase of traceback frames no hand rule names, and memory errors no hand rule names. Both come after
the hand rules (`failures.py`, `frames.py`), which stay first because they were checked against real
logs."""

from __future__ import annotations

import re
from functools import cache

from oomkit.triage.knowledge import SHARED, FrameRow, MessageRow, frame_phase, match_message, match_messages
from oomkit.triage.rules import PHASES, Failure

# Modules whose frames place a failure even where no function of theirs is on a phase path: the
# package is the phase (vllm/distributed is NCCL, custom all-reduce, Ray/gloo set-up).
MODULE_PHASES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        # not the KV connectors (vllm/distributed/kv_transfer): their code runs in every step of the requests it
        # moves, so a bug there is the step's; a failed transfer is named by its message (E-KVXFER)
        # platform plugins mirror the package (vllm_ascend/distributed/device_communicators/pyhccl.py is HCCL's
        # pynccl), their KV connectors aside as well
        re.compile(
            r"/vllm/distributed/(?!kv_transfer/)|/vllm/executor/ray_|/vllm/v1/executor/ray_"
            r"|/vllm_\w+/distributed/(?!kv_transfer/|\w*connector|\w*mooncake|llmdatadist)"
        ),
        "network_communication",
        "vllm/distributed: process groups, NCCL/pynccl, custom all-reduce; ray executors: placement groups; the "
        "same package of platform plugins (vllm_ascend/distributed)",
    ),
    (
        # and the Run:ai model streamer, which `--load-format runai_streamer` reads the checkpoint through (from S3 or a
        # file system) while the model loader fills the weights
        re.compile(r"/vllm/model_executor/model_loader/|(?:^|/)runai_model_streamer/"),
        "weight_loading",
        "vllm/model_executor/model_loader; runai_model_streamer (--load-format runai_streamer)",
    ),
    (
        # nn.Module constructors: vLLM builds a model's modules only while loading it (model_loader's
        # `initialize_model` calls the model class, whose __init__ builds its layers, `make_layers` through a
        # lambda; layers allocate their parameters in `create_weights`); serving calls `forward`
        re.compile(
            r"/vllm/(?:model_executor/)?models/\S+\.py::(?:__init__|<lambda>|make_layers)$"
            r"|/vllm/model_executor/layers/\S+\.py::create_weights$"
            # a quantization config's constructor also runs while the engine's settings are built
            r"|/vllm/model_executor/layers/(?!quantization/)\S+\.py::__init__$"
        ),
        "weight_loading",
        "vllm/model_executor/models and layers: module constructors, run by the model loader's initialize_model",
    ),
    (
        # a request's grammar is compiled and advanced only for requests (the mined call graph does not reach
        # these through the grammar's property and future accessors)
        re.compile(r"/vllm/v1/structured_output/|/vllm/model_executor/guided_decoding/"),
        "serving",
        "vllm/v1/structured_output (V1) and vllm/model_executor/guided_decoding (V0): per-request grammars",
    ),
    (
        # building the engine's configuration from its arguments (arg_utils: from_cli_args, create_engine_config;
        # the config package's classes), Triton building its driver's launcher with the host compiler, and
        # multiprocessing's spawn re-running the parent's main module: the settings or the installation, before any
        # worker does its own step; and vllm/envs.py, whose getters parse the VLLM_* environment variables wherever
        # one is first read (a port Kubernetes' service discovery set to a URI fails in get_open_port's read of it)
        re.compile(
            r"/vllm/engine/arg_utils\.py::|/vllm/config(?:/\S+)?\.py::|/triton/backends/\w+/driver\.py::"
            r"|/multiprocessing/spawn\.py::(?:prepare|_fixup_main_from_path)$|/vllm/envs\.py::"
        ),
        "environment",
        "vllm/engine/arg_utils.py and vllm/config (settings validation); vllm/envs.py (VLLM_* variables); "
        "triton/backends/*/driver.py (launcher build); multiprocessing/spawn.py prepare (a main module re-imported "
        "without a __main__ guard)",
    ),
    (
        # the KV-cache coordinator and managers are built once, with the scheduler, from the KV-cache groups the start-up
        # sized (V1's Scheduler.__init__ -> KVCacheManager -> get_kv_cache_coordinator); serving calls their other methods
        re.compile(
            r"/vllm(?:_\w+)?/v1/core/(?:\w+_)?(?:kv_cache_coordinator|kv_cache_manager|block_pool)\.py::"
            r"(?:__init__|verify_and_split_kv_cache_groups|get_kv_cache_coordinator)$"
        ),
        "kv_cache_allocation",
        "vllm/v1/core kv_cache_coordinator, kv_cache_manager, single_type_kv_cache_manager, block_pool: constructors",
    ),
    (
        re.compile(r"/vllm/compilation/cuda_graph\.py|/vllm/worker/model_runner\.py::capture"),
        "cudagraph_capture",
        "vllm/compilation/cuda_graph.py (CUDAGraphWrapper)",
    ),
)
# Functions that call whatever method they are given (RPC to workers, busy loops): the call graph
# reaches them from every phase, so their own phase says nothing (vllm/worker/worker_base.py,
# vllm/v1/executor/multiproc_executor.py, vllm/utils run_method).
DISPATCHERS = frozenset(
    {
        "execute_method",
        "run_method",
        "collective_rpc",
        "_run_workers",
        "worker_busy_loop",
        "worker_main",
        "run_busy_loop",
        "_process_input_queue",
        "__call__",
        "inner",
        "wrapper",
        "_wrapper",
        "sync_wrapper",
        "_call_impl",
        "_wrapped_call_impl",
    }
)
# Cheap test before the template index: vLLM's memory messages all say one of these.
MEMORY_WORDS = re.compile(r"emory|OOM|KV cache|cache blocks")
TEMPLATE_RANK = 76  # below E-TORCHOOM (80): a torch OOM line is the more direct evidence


def source_frames_phase(stack: list[str]) -> str | None:
    """The phase of a traceback (frames as "path::function", outermost first) from vLLM's source:
    the innermost frame that is itself a phase's root function, else the innermost frame in a
    package that is a phase, else the innermost frame on one phase's path. Dispatchers, which run
    whatever method they are handed, and helpers the roots of several phases reach place nothing."""
    frames = [tuple(f.rsplit("::", 1)) for f in stack if "::" in f and f.rsplit("::", 1)[1] not in DISPATCHERS]
    rows = [row for path, func in frames if (row := frame_phase(path, func)) is not None]
    rooted = _root_phase(rows)
    if rooted is not None:
        return rooted
    for path, func in reversed(frames):
        if func != "<module>" and (phase := module_phase(f"{path}::{func}")) is not None:
            return phase  # a module's body runs at import, whatever the package does later
    return next((row.phase for row in reversed(rows) if row.phase != SHARED), None)


def _root_phase(rows: list[FrameRow]) -> str | None:
    """The innermost root's phase (`determine_available_memory` under the engine's `_initialize_kv_caches`,
    which runs profiling, KV sizing and graph capture in turn, is profiling)."""
    return next((row.phase for row in reversed(rows) if row.is_root), None)


def template_failure(msg: str) -> Failure | None:
    """A memory error vLLM raises or logs, found by its template, when no hand rule named it."""
    if not MEMORY_WORDS.search(msg):
        return None
    row = match_message(msg)
    if row is None or not row.is_oom or row.kind != "failure":
        return None
    return _failure_of(row)


# Phases a non-memory exception's template may name: the start-up steps. `serving` templates are
# left to frames (prefill or decode, and most serving errors are bugs: not_oom_other).
STARTUP_PHASES = frozenset(PHASES[: PHASES.index("timeout")])  # environment .. cudagraph_capture


# Where vLLM validates its settings and the model's config while it builds the engine's configuration,
# before any worker starts: what these raise is the environment (arguments, model type, platform), whatever
# later step also reaches the function (the registry's refusal is reached from load_model in V0 too).
CONFIG_SOURCES = re.compile(
    r"^vllm/config[/.]|^vllm/engine/arg_utils\.py:|^vllm/transformers_utils/config\.py:|:_ModelRegistry\._raise_for_unsupported$"
)


def template_phase(msg: str) -> tuple[str, MessageRow] | None:
    """The start-up phase of an exception vLLM raises (the issue's decision order: frames, then
    markers, then the message's template), for an exception no frame or marker places."""
    rows = match_messages(msg)
    placed = [(phase, row) for row in rows if (phase := _startup_phase(row)) is not None]
    if not placed and not refused_setting(msg):  # a refusal's wording says more than its package
        placed = [(phase, row) for row in rows if row.kind == "failure" and (phase := _package_phase(row)) is not None]
    if len({phase for phase, _ in placed}) != 1:  # none, or the places that raise it disagree
        return None
    return placed[0]


# A setting, device count or platform feature refused in so many words: vLLM's argument and config checks,
# its platforms' and plugins' device checks and the libraries under it (pyzmq, Ray's placement groups) word
# their refusals this way ("X is not supported", "only supports", "is not applicable in headless mode",
# "Insufficient devices", "N is not divisible by M"), and so does CPython when a wrapper calls a vLLM built with another
# signature. Raised before the engine serves, such a message is the settings or the installation refusing the launch,
# which the labelling convention files under environment.
REFUSAL = re.compile(
    r"\bnot supported\b|\bunsupported\b|\bdoes not support\b|\bdoesn't support\b|\bonly supports?\b"
    r"|\bis not applicable\b|\bnot divisible by\b|\bdivide\b.{0,60}\bevenly\b|\bInsufficient devices\b"
    r"|\b(?:is|are) only supported (?:for|on|with|by|in|when)\b"  # "FusedMoE flashinfer kernels are only supported for Llama4"
    r"|\bis invalid\. Valid\b|\bcannot have more than\b|\bhas no (?:\w+ ){0,2}kernel for\b"
    # a name outside the choices it lists ("Unknown attention backend: 'ASCEND'. Valid options are: FLASH_ATTN, ...",
    # the KV-cache dtype and audio-language checks' "Valid values are" and "Valid choices are")
    r"|\bValid (?:options|values|choices) are\b"
    # or a name the release does not know, in the words its checks use ("Unknown quantization method: exl3. Must be
    # one of [...]", "Unknown speculative decoding method: mlp_speculator", "Unknown model type: minicpmo")
    r"|\bUnknown (?:[\w-]+ ){0,3}(?:method|type|backend|mode|format|dtype|architecture): "
    # a setting's bound, as the config checks word it ("max_num_batched_tokens must be <= 65528 when LoRA is enabled",
    # "cp_world_size must be positive", "local_world_size (16) must be less than or equal to the number of visible
    # devices (8)")
    r"|\bmust be (?:<=?|>=?|positive|non-negative|a multiple of|divisible by|between|at least|at most|less than|greater than|smaller than|larger than)"
    # the same bound written as a range ("When using LoRA, vocab size must be 32000 >= vocab_size <= 33024")
    r"|\bmust be -?\d[\d,.]* ?[<>]=?"
    # a feature not implemented yet, in the wording of early quantization configs ("GGUF quantization hasn't supported
    # tensor parallelism yet")
    r"|\bha(?:s|ve)(?:n't| not) (?:yet )?(?:been )?supported\b"
    r"|\b[Pp]lease (?:try|use|install|set|upgrade|reinstall)\b|\bdo(?: not|n't) support\b"
    # a feature this backend, platform or model class does not implement (NotImplementedError, often bare)
    r"|\bNotImplementedError\b|\bnot implemented (?:for|on|in|yet)\b"
    # a call whose signature the installed release does not have: a wrapper or plugin built for another vLLM
    # (CPython's TypeError for a keyword the callee lacks, or for arguments it now requires)
    r"|\bgot an unexpected keyword argument\b|\bgot multiple values for (?:keyword )?argument\b"
    r"|\bgot some positional-only arguments passed as keyword arguments\b"
    r"|\bmissing \d+ required (?:positional|keyword-only) arguments?\b|\btakes \d+ positional arguments? but \d+"
    # or a model config without a field the installed code reads (a config class from another Transformers or vLLM
    # release, or a checkpoint's own config class)
    r"|'\w*Config' object has no attribute '"
    # or a checkpoint's own code (trust_remote_code, loaded as transformers_modules.*) without a class the installed
    # Transformers or vLLM asks it for: the model's code and the library come from releases that do not go together
    r"|module 'transformers_modules\.[^']*' has no attribute '"
    # or vLLM's engine objects without an attribute a wrapper reads (FastChat's worker reading AsyncLLMEngine's `.engine`
    # from V1's AsyncLLM, a trainer reaching V0's `llm_engine.model_executor` on V1): the wrapper's release, not vLLM's
    r"|'(?:LLM|LLMEngine|AsyncLLMEngine|AsyncLLM|MQLLMEngineClient|\w*EngineCoreClient)' object has no attribute '",
)


def refused_setting(msg: str) -> bool:
    """An exception worded as a refusal of a setting, a device count or a platform feature."""
    return REFUSAL.search(msg) is not None


def _startup_phase(row: MessageRow) -> str | None:
    if row.kind != "failure":
        return None
    if CONFIG_SOURCES.search(row.source) and row.phase in (None, "weight_loading", "environment"):
        return "environment"
    if row.phase not in STARTUP_PHASES or _raised_in_shared_helper(row):
        return None
    return row.phase


def _package_phase(row: MessageRow) -> str | None:
    """A template whose function no one phase's path reaches (or the paths of several do), raised in a
    package that is a phase (`MODULE_PHASES`: vllm/model_executor/model_loader is weight loading,
    vllm/distributed the network): the package places it, as it places a frame there."""
    module, _, qualified = row.source.partition(":")
    phase = module_phase(f"/{module}::{qualified.rsplit('.', 1)[-1]}") or _layer_method_phase(module, qualified)
    return phase if phase in STARTUP_PHASES else None


# A quantization or fused-MoE method object is made for each layer while the model is built (a layer's
# `quant_method = quant_config.get_quant_method(self, prefix)`); its `apply` runs the layer's forward, which start-up
# first runs in the profile run (V1 `profile_run`, V0 `determine_num_available_blocks`): a check there that a
# setting or checkpoint fails fails then, before any request.
LAYER_METHOD_BUILT = re.compile(r"^\w*Method\.(?:__init__|create_weights|process_weights_after_loading)$")
LAYER_METHOD_RUN = re.compile(r"^\w*Method\.apply\w*$")


def _layer_method_phase(module: str, qualified: str) -> str | None:
    if not module.startswith("vllm/model_executor/layers/"):
        return None
    if LAYER_METHOD_BUILT.match(qualified):
        return "weight_loading"
    return "memory_profiling" if LAYER_METHOD_RUN.match(qualified) else None


def module_phase(where: str) -> str | None:
    """The phase of the first `MODULE_PHASES` package that "path::function" lies in."""
    return next((phase for pattern, phase, _source in MODULE_PHASES if pattern.search(where)), None)


def _raised_in_shared_helper(row: MessageRow) -> bool:
    """The template's function is a helper the roots of several phases reach (`shared` in the frame table):
    the phase mined for the template is only its nearest root's, so the log's own frames and markers place it."""
    module, _, qualified = row.source.partition(":")
    frame = frame_phase(module, qualified.rsplit(".", 1)[-1])
    return frame is not None and frame.phase == SHARED


@cache
def _failure_of(row: MessageRow) -> Failure:
    phase = row.phase if row.phase not in (None, "serving") else None  # serving: frames tell prefill/decode
    if _raised_in_shared_helper(row):
        phase = None
    versions = f"{row.versions[0]}..{row.versions[-1]}" if row.versions else "no release"
    return Failure(
        f"K-{row.id}",
        re.compile(row.pattern),
        "kv" if phase == "kv_cache_allocation" else "oom",
        phase,
        True,
        TEMPLATE_RANK,
        f"vLLM's own memory error ({row.exception or row.level} in {row.source})",
        "",
        f"vLLM source {row.source}, releases {versions} (scripts/gen_vllm_knowledge.py)",
    )
