"""Classes of session 13 (issue 13). vLLM builds a model's modules only while it loads the model (the loader's
`initialize_model` calls the model class; its `__init__` builds the layers, through `make_layers`' lambda; layers
allocate their parameters in `create_weights`), so a traceback in those constructors is weight loading, also when
the excerpt stops before the exception line; a quantization config's constructor is not (it also runs while the
engine's settings are built), and a model's `forward` is not (profiling, graph capture and serving all run it). A crash wrapper whose own process's frames place
nothing ("WorkerProc hit an exception" quoted without its process prefix, the API server's "Engine core
initialization failed. See root cause above" under its own launch frames) reports the other process's failure: the
step its traceback is in, when the other processes' tracebacks name exactly one."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict, frames

WORKER = "(VllmWorker rank=4 pid=555) ERROR 05-04 12:38:38 [multiproc_executor.py:380] "
CORE = "(EngineCore pid=934) ERROR 07-20 02:58:31 [core.py:1330] "
API = "(APIServer pid=1) "
MOE = "vllm/model_executor/models/qwen3_moe.py"
CONSTRUCTION = (
    (MOE, "<lambda>", "lambda prefix: Qwen3MoeDecoderLayer(config=config,"),
    (MOE, "__init__", "self.mlp = Qwen3MoeSparseMoeBlock(config=config,"),
    (MOE, "__init__", "self.experts = FusedMoE(num_experts=self.n_routed_experts,"),
    (
        "vllm/model_executor/layers/fused_moe/layer.py",
        "__init__",
        "self.quant_method.create_weights(layer=self, **moe_quant_params)",
    ),
)
LAUNCH = frames(
    API,
    ("vllm/v1/engine/utils.py", "launch_core_engines", "wait_for_engine_startup("),
    ("vllm/v1/engine/utils.py", "wait_for_engine_startup", 'raise RuntimeError("Engine core initialization failed. "'),
) + (
    f"{API}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore': 1}\n"
)


def cut(text: str) -> str:
    """The excerpt stops inside the traceback: its last frame, no exception line."""
    return text + "[...]\n"


CASES = {
    "cut_in_model_construction": Case(cut(frames(WORKER, *CONSTRUCTION)), "weight_loading", False, "low"),
    "cut_in_a_layer_allocating_its_weights": Case(
        cut(frames(WORKER, *CONSTRUCTION[2:])), "weight_loading", False, "low"
    ),
    "cut_in_a_quantization_config_constructor": Case(
        cut(
            frames(
                WORKER,
                (
                    "vllm/model_executor/layers/quantization/awq.py",
                    "from_config",
                    "return cls(weight_bits, group_size)",
                ),
                ("vllm/model_executor/layers/quantization/awq.py", "__init__", "raise ValueError("),
            )
        ),
        "unknown",
        False,
    ),
    "cut_in_a_models_forward_is_not_construction": Case(
        cut(
            frames(
                WORKER,
                (
                    MOE,
                    "forward",
                    "hidden_states = self.experts(hidden_states=hidden_states, router_logits=router_logits)",
                ),
                (
                    "vllm/model_executor/layers/fused_moe/layer.py",
                    "forward",
                    "return self.forward_impl(hidden_states, router_logits)",
                ),
            )
        ),
        "unknown",
        False,
    ),
    "wrapper_without_its_prefix_and_a_profiling_traceback": Case(
        "WorkerProc hit an exception: %s\n"
        + cut(
            frames(
                WORKER,
                ("vllm/v1/executor/multiproc_executor.py", "worker_busy_loop", "output = func(*args, **kwargs)"),
                ("vllm/v1/worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
            )
        ),
        "memory_profiling",
        False,
        "low",
    ),
    "api_server_wrapper_and_the_engines_cut_traceback": Case(
        cut(
            frames(
                CORE,
                ("vllm/v1/engine/core.py", "__init__", "self.model_executor = executor_class(vllm_config)"),
                ("vllm/model_executor/model_loader/default_loader.py", "load_weights", "loaded = model.load_weights("),
            )
        ).replace("[...]\n", "")
        + LAUNCH,
        "weight_loading",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session13_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
