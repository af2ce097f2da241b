"""Classes of session 22 (issue 13). A readiness check outside vLLM that keeps failing while the engine starts
(a Kubernetes startup or readiness probe, a hosting platform's start-up limit, TRL's client polling the server's
health endpoint), with the log ending in it, is a start-up stall; any later start-up line drops it, as it drops
vLLM's own waits. TRL's client giving up on the server is a readiness time-out. A checkpoint tensor refused by
name is weight loading, whether the paste kept KeyError's quotes or not, in Qwen2-VL's 0.6 wording ("Unexpected
weight: ...") or in MLX's strict load (vllm-metal: "Received 54 parameters not in model: ..."). CUDA's peer-to-peer
errors ("peer access is not supported between these two devices") are the link between the GPUs, which custom
all-reduce and NCCL's P2P transport need, though worded as a refusal. Kunlunxin's collective library (XCCL, under
vLLM-Kunlun) failing to set up its chip-to-chip address window is the network, as HCCL's errors are on Ascend.
vLLM's check that one request of max_model_len fits the KV cache is read in a retyped paste ("The model’s max sew
len ...") and in one cut after "To serve at least one"."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

STARTING = (
    "INFO 05-01 12:38:19 gpu_model_runner.py:872] Loading model weights took 5.3800 GB\n"
    "INFO 05-01 12:39:00 backends.py:579] Using cache directory: /root/.cache/vllm/torch_compile_cache/71bb364cc9/rank_0 "
    "for vLLM's torch.compile\n"
)

CASES = {
    "a_failing_startup_probe_at_the_end_of_the_log_is_a_start_up_stall": Case(
        "INFO 07-22 07:59:44 api_server.py:212] vLLM API server version 0.5.2\n"
        'Warning  Unhealthy  2m (x40 over 8m)  kubelet  Startup probe failed: Get "http://10.244.0.208:8000/health": '
        "dial tcp 10.244.0.208:8000: connect: connection refused\n",
        "timeout",
        False,
        "medium",
    ),
    "a_platforms_start_up_limit_is_a_start_up_stall": Case(
        STARTING + "Runner failed with exception: Runner has been initializing for too long: 300 seconds\n",
        "timeout",
        False,
        "medium",
    ),
    "trls_client_polling_a_server_that_never_answers_is_a_start_up_stall": Case(
        "2025-03-26 05:52:15 - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds...\n"
        "2025-03-26 05:53:17 - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds...\n",
        "timeout",
        False,
        "medium",
    ),
    "a_probe_the_start_got_past_is_no_failure": Case(
        'Readiness probe failed: Get "http://10.0.0.5:8000/health": dial tcp 10.0.0.5:8000: connect: connection '
        "refused\n" + STARTING + "INFO:     Application startup complete.\n",
        "healthy",
        False,
    ),
    "trls_client_giving_up_is_a_readiness_time_out": Case(
        "ConnectionError: The vLLM server can't be reached at 0.0.0.0:8000 after 240 seconds. Make sure the server is "
        "running by running `trl vllm-serve`.\n",
        "timeout",
        False,
    ),
    "an_unquoted_checkpoint_key_is_weight_loading": Case(
        "KeyError: layers.28.mlp.experts.w2_weight_quantizer._double_scale\n",
        "weight_loading",
        False,
    ),
    "qwen2_vls_unexpected_weight_is_weight_loading": Case(
        "ValueError: Unexpected weight: visual.blocks.0.attn.proj.weight\n",
        "weight_loading",
        False,
    ),
    "mlxs_strict_load_under_vllm_metal_is_weight_loading": Case(
        "ValueError: Received 54 parameters not in model: language_model.model.layers.24.self_attn.k_norm.weight, …\n",
        "weight_loading",
        False,
    ),
    "gpus_that_cannot_map_each_others_memory_are_the_link_not_a_setting": Case(
        "RuntimeError: CUDA error: peer access is not supported between these two devices\n",
        "network_communication",
        False,
    ),
    "kunlunxins_collective_library_failing_its_set_up_is_the_network": Case(
        "[XCCL][util.cpp:346] dev 0 addr_window not properly set\n"
        "[XCCL][init.cpp:1227] host 10.0.0.7 addr_window check failed\n"
        "ValueError: [INVALID PARAMETER]: error code= 1(at .../torch_xmlir/csrc/new_xccl/XCCLUtils.hpp:53)\n",
        "network_communication",
        False,
    ),
    "a_retyped_kv_cache_check_is_still_the_kv_cache_check": Case(
        "The model’s max sew len (32768) is larger than the maximum number of tokens that can be stored in KV cache "
        "(18896). Try increasing ‘gpu_memory_utilization’ or decreasing ‘max_model_len’ when initializing the engine.\n",
        "kv_cache_allocation",
        True,
    ),
    "a_kv_cache_check_cut_after_its_first_words_is_still_the_check": Case(
        "(EngineCore pid=401) ERROR [core.py:1140] ValueError: To serve at least one\n[...]\n",
        "kv_cache_allocation",
        True,
    ),
    "a_key_error_that_is_not_a_parameter_stays_a_crash": Case(
        "KeyError: layers.28.mlp.experts.w2_weight_quantizer._double_scale is not here\n",
        "not_oom_other",
        False,
        "low",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session22_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
