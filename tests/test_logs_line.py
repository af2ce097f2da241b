"""Line parsing: wrappers and headers of every format in vllm-internals.md §1."""

from hypothesis import given, settings
from hypothesis import strategies as st

from oomkit.logs import parse_line


def test_v1_032_prefix_and_header():
    r = parse_line("(EngineCore pid=22588) ERROR 12-02 15:44:27 [core.py:1510] ValueError: boom", "a.log", 7)
    assert (r.proc, r.pid, r.level, r.time, r.src, r.msg) == (
        "EngineCore",
        22588,
        "ERROR",
        "12-02 15:44:27",
        "core.py:1510",
        "ValueError: boom",
    )
    assert (r.file, r.line) == ("a.log", 7)


def test_v0_header_without_bracket():
    r = parse_line("INFO 12-02 15:18:01 worker.py:123] Memory profiling takes 3.2 seconds")
    assert r.level == "INFO" and r.msg == "Memory profiling takes 3.2 seconds"


def test_worker_prefixes():
    for proc in ("Worker_TP0", "EngineCore_DP0", "VllmWorker rank=3", "Worker_PP1_TP0", "APIServer"):
        r = parse_line(f"({proc} pid=42) INFO 10-31 15:07:49 [gpu_worker.py:298] Available KV cache memory: 1.71 GiB")
        assert r.proc == proc and r.msg == "Available KV cache memory: 1.71 GiB"


def test_ray_prefix_ip_and_repeat():
    r = parse_line(
        "(RayWorkerWrapper pid=1355, ip=10.0.0.2) ERROR 07-25 06:51:17 worker_base.py:382] RuntimeError: x [repeated 12x across cluster]"
    )
    assert r.proc == "RayWorkerWrapper" and r.repeat == 12 and r.msg == "RuntimeError: x"


def test_nested_ray_actor_prefixes():
    r = parse_line(
        "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=4385) (EngineCore_DP0 pid=6448) INFO 02-12 15:00:36 [backends.py:319] torch.compile takes 2222.52 s in total"
    )
    assert r.msg == "torch.compile takes 2222.52 s in total" and r.pid == 4385


def test_docker_compose_wrapper():
    r = parse_line(
        "vllm-openai_1  | (RayWorkerWrapper pid=3487) ERROR 06-05 16:30:08 worker_base.py:148] RuntimeError: boom"
    )
    assert r.proc == "RayWorkerWrapper" and r.msg == "RuntimeError: boom"


def test_kubectl_border_and_prefix():
    r = parse_line("│ (APIServer pid=1) INFO 12-02 15:42:26 [model.py:2152] Using max model len 1024 │")
    assert r.msg == "Using max model len 1024"
    r = parse_line("[pod/vllm-0/vllm] INFO 12-02 15:42:26 [model.py:2152] Using max model len 1024")
    assert r.msg == "Using max model len 1024"


def test_journald_and_rfc3339():
    r = parse_line(
        "Dec 02 15:18:01 gpu-node-3 vllm[1234]: (EngineCore pid=9) INFO 12-02 15:18:01 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: x"
    )
    assert r.proc == "EngineCore" and r.msg.startswith("Initializing a V1")
    r = parse_line("2026-12-02T15:18:01.123Z INFO:     Application startup complete.")
    assert r.msg == "Application startup complete."


def test_every_journalctl_stamp_and_cris_is_peeled_from_a_traceback():
    """Lines without vLLM's header (a traceback's) keep only what the process printed (before session 29 the
    precise, ISO, full and epoch stamps and CRI's stream and tag stayed on them, and the traceback was not read)."""
    for stamp in (
        "Dec 07 14:10:08.123456 gpu01 vllm[123]: ",
        "2026-12-07T14:10:08+0000 gpu01 vllm[123]: ",
        "2026-12-07T14:10:08.123456+00:00 gpu01 python3[123]: ",
        "Mon 2026-12-07 14:10:08 UTC gpu01 vllm[123]: ",
        "1765116608.123456 gpu01 vllm[123]: ",
        "2026-04-10T08:52:23.883665519+08:00 stderr F ",
        "2026-04-10T08:52:23.883665519Z stdout P ",
    ):
        assert parse_line(stamp + "Traceback (most recent call last):").msg == "Traceback (most recent call last):"
    assert parse_line("2026-12-07 14:10:08 host run: x[1]: y").msg == "host run: x[1]: y"  # no "unit[pid]: " after it


def test_a_wrapper_date_stamp_before_vllms_header():
    for stamp in ("[2024-07-08 15:17:34] ", "2024-07-08 15:17:34,123 ", "[2024-07-08T15:17:34.5+08:00]  "):
        r = parse_line(stamp + "INFO 07-08 07:17:34 metrics.py:334] Avg prompt throughput: 1.0 tokens/s")
        assert (r.level, r.time, r.src) == ("INFO", "07-08 07:17:34", "metrics.py:334"), stamp
        assert r.msg.startswith("Avg prompt throughput")
    # Another program's own dated line keeps its text: it is not read as vLLM's header.
    r = parse_line("2024-06-05 10:00:00,123\tINFO worker.py:1724 -- Started a local Ray instance.")
    assert r.level is None and r.msg.startswith("INFO worker.py:1724")


def test_fastchats_format_around_vllms_lines():
    # FastChat logs "%(asctime)s | %(levelname)s | %(name)s | %(message)s"; its stderr logger says ERROR for every
    # line, so the level read is vLLM's own, inside
    r = parse_line("2024-01-10 09:30:12 | ERROR | stderr | INFO 01-10 09:30:12 llm_engine.py:222] # GPU blocks: 3")
    assert (r.level, r.src, r.msg) == ("INFO", "llm_engine.py:222", "# GPU blocks: 3")
    r = parse_line("2025-03-24 22:04:27 | ERROR | stderr | AttributeError: 'AsyncLLM' object has no attribute 'engine'")
    assert r.msg == "AttributeError: 'AsyncLLM' object has no attribute 'engine'"


def test_ansi_and_carriage_return():
    r = parse_line("\x1b[0;36m(APIServer pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m 12-02 15:42:26 [x.py:1] hello")
    assert r.msg == "hello" and r.proc == "APIServer"
    r = parse_line(
        "Loading shards:  10% |\rLoading shards:  55% |\rLoading safetensors checkpoint shards: 100% Completed | 2/2\n"
    )
    assert r.msg.startswith("Loading safetensors checkpoint shards: 100%")


def test_uvicorn_and_reporter_condensed():
    assert parse_line("INFO:     Application startup complete.").msg == "Application startup complete."
    r = parse_line("INFO  [kv_cache_utils.py]  GPU KV cache size: 150,745 tokens")
    assert r.msg == "GPU KV cache size: 150,745 tokens"


def test_raw_line_kept_and_nul_dropped():
    raw = "Traceback (most recent call last):\x00"
    r = parse_line(raw + "\n", "f", 3)
    assert r.raw == raw and r.msg == "Traceback (most recent call last):"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parse_line_never_raises(text):
    r = parse_line(text, "x", 1)
    assert isinstance(r.msg, str) and r.repeat >= 1


def test_header_after_a_launchers_stamp():
    # TorchServe, Unsloth's subprocess, KServe and pasted tables put their own text before vLLM's header.
    for stamp in (
        "[INFO ] W-9000-model_1.0-stdout MODEL_LOG - ",
        "vLLM STDOUT: ",
        "kserve-container ",
        "| ",
        "[",
        "[/bin/sh]: ",
        "(Worker pid=1802) [Stage-0] ",
    ):
        r = parse_line(stamp + "INFO 08-16 11:53:40 metrics.py:418] Avg prompt throughput: 1.0 tokens/s")
        assert (r.level, r.time, r.src, r.msg) == (
            "INFO",
            "08-16 11:53:40",
            "metrics.py:418",
            "Avg prompt throughput: 1.0 tokens/s",
        ), stamp


def test_flattened_records_and_progress_bars_keep_the_line():
    # A tqdm bar drawn without a newline, traceback text, or several records on one line: each is a record of its
    # own, so the line is not cut at the header (the bar's progress and the later record stay readable).
    for line in (
        "Capturing CUDA graphs (decode, FULL):  80%|######   | 41/51 [00:04<00:01,  9.04it/s]DEBUG 02-24 02:39:01 "
        "[cuda_graph.py:1] x",
        'vllm/executor/x.py", line 166, in execute_model_async ERROR 06-19 11:25:01 async_llm_engine.py:52] boom',
        "[Bug]: INFO 06-19 11:23:59 metrics.py:341] Avg prompt throughput: 1 tokens/s ERROR 06-19 11:25:01 "
        "async_llm_engine.py:52] Engine iteration timed out",
    ):
        assert parse_line(line).level is None, line


def test_level_word_inside_a_word_is_no_header():
    assert parse_line("NOINFO 08-16 11:53:40 metrics.py:418] x").level is None


def test_header_whose_level_the_paste_cut_off():
    r = parse_line("11-21 00:12:08 llm_engine.py:624] Avg prompt throughput: 0.0 tokens/s, Running: 20 reqs")
    assert (r.level, r.time, r.src, r.msg) == (
        None,
        "11-21 00:12:08",
        "llm_engine.py:624",
        "Avg prompt throughput: 0.0 tokens/s, Running: 20 reqs",
    )
