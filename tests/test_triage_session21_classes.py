"""Classes of session 21 (issue 13). An exception that nothing in the log places, whose mined template names a function
no one phase's path reaches (or the paths of several do), is placed by the package that raises it, as a frame there
is: vllm/model_executor/model_loader is weight loading (`default_weight_loader`'s shape assert, which the roots of
several phases reach), and a model class's constructor builds its layers only while the weights are loaded. A
refusal's wording still outranks the package: a pre-quantized bitsandbytes checkpoint refused with tensor parallelism
is the settings, although the loader raises it. Docker's `"OOMKilled": false` (docker inspect's state of a container
that was not killed for memory) is not the OOM killer. A kernel family refused in so many words ("FusedMoE flashinfer
kernels are only supported for Llama4") is a refusal of the settings. vLLM's check of the Ray cluster's GPUs against
the world size, in 0.2-0.5's wording ("... available GPUs in the cluster") as in the newer one, is Ray's placement
(E-RAYPLACE). A serving benchmark's summary counting the requests the server completed ("Successful requests: 768",
vLLM's `vllm bench serve` and SGLang's bench_serving) marks the server serving: with no failure line, the log is
healthy."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

WORKER = "(Worker_TP2_EP2 pid=229) ERROR 04-29 06:49:28 [multiproc_executor.py:870] "

CASES = {
    "a_shape_assert_of_the_default_weight_loader_is_weight_loading": Case(
        f"{WORKER}AssertionError: Attempted to load weight (torch.Size([1696, 4096])) into parameter "
        "(torch.Size([1856, 4096]))\n",
        "weight_loading",
        False,
        "low",
    ),
    "a_model_constructors_error_is_weight_loading": Case(
        "RuntimeError: No Qwen3Next layer found in the model.layers.\n",
        "weight_loading",
        False,
        "low",
    ),
    "a_refusal_raised_by_the_loader_stays_the_environment": Case(
        "ValueError: Prequant BitsAndBytes models with tensor parallelism is not supported. Please try with pipeline "
        "parallelism.\n",
        "environment",
        False,
        "low",
    ),
    "docker_inspect_saying_not_oom_killed_is_not_an_oom": Case(
        "2026-09-14T08:19:31.697350293Z (APIServer pid=1) INFO 09-14 08:19:31 [loggers.py:310] Engine 000: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 18.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 12.8%, Prefix cache hit rate: 0.0%\n"
        '2026-09-14T08:19:37.380351260Z (APIServer pid=1) INFO: 100.100.116.69:56946 - "POST /v1/chat/completions '
        'HTTP/1.1" 200 OK\n'
        "[...]\n"
        '{\n  "Status": "exited",\n  "Running": false,\n  "OOMKilled": false,\n  "Dead": false,\n  "ExitCode": 255\n}\n',
        "healthy",
        False,
    ),
    "a_kernel_only_supported_for_another_model_is_a_refused_setting": Case(
        "(VllmWorker TP4 pid=3020312) ERROR 09-02 08:16:39 [multiproc_executor.py:574] AssertionError: FusedMoE "
        "flashinfer kernels are only supported for Llama4\n",
        "environment",
        False,
        "low",
    ),
    "too_few_gpus_in_the_ray_cluster_is_rays_placement": Case(
        "ValueError: The number of required GPUs exceeds the total number of available GPUs in the cluster.\n",
        "network_communication",
        False,
    ),
    "a_benchmark_summary_of_completed_requests_is_a_serving_server": Case(
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     30        \n"
        "Benchmark duration (s):                  41.92     \n"
        "Total input tokens:                      30720     \n"
        "Request throughput (req/s):              0.72      \n"
        "---------------Time to First Token----------------\n"
        "Mean TTFT (ms):                          312.55    \n",
        "healthy",
        False,
        "medium",
    ),
    "a_benchmark_summary_without_a_completed_request_is_not": Case(
        "============ Serving Benchmark Result ============\nSuccessful requests:                     0         \n",
        "unknown",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session21_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
