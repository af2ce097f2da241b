"""Prefill steps replayed on vLLM's own scheduler (forecast.prefill_steps), and the CPU engine core's
block size after its handshake (forecast.engine._after_handshake). These run the installed vLLM's
scheduler (no server, no GPU); they skip when vLLM is not importable. The real engine's behaviour they
follow was seen on the hybrid testbed with a scheduler probe (docs/forecast.md, "Run 4's TTFT misses")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip(
    "vllm.v1.core.sched.scheduler",
    reason="the forecast drives vLLM's scheduler: `pip install 'oomkit[forecast]'` (CI installs it)",
)

from oomkit.forecast.calibrate import calibrate  # noqa: E402
from oomkit.forecast.engine import build_engine  # noqa: E402
from oomkit.forecast.inputs import plan_request  # noqa: E402
from oomkit.forecast.prefill_steps import prefill_steps  # noqa: E402
from oomkit.plan import plan  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"
HYBRID = EXAMPLES / "testbed-hybrid-small-kv.yaml"
FIXTURE_RUN = Path(__file__).parent / "fixtures" / "decide" / "ladder-small-kv"


def _engine(profile: Path):
    return build_engine(plan(plan_request(str(profile), {})), 0)


def _run_with(tmp_path: Path, profile: dict) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": "oomkit.run/1", "run_id": "run", "profile": profile}))
    return run


def test_the_cpu_engine_core_chunks_hybrid_prefills_at_the_platform_block(tmp_path):
    engine = _engine(HYBRID)
    kv_blocks = {g.kv_cache_spec.block_size for g in engine.scheduler.kv_cache_config.kv_cache_groups}
    assert kv_blocks <= {128, 256}  # 256 with AVX-512 BF16, else 128 (the profile's own note)
    assert engine.scheduler.cache_config.block_size == 128  # what platforms/cpu.py sets again after the handshake
    given = yaml.safe_load(HYBRID.read_text())
    given["args"]["block_size"] = 256
    (tmp_path / "given.yaml").write_text(yaml.safe_dump(given))
    kept = _engine(tmp_path / "given.yaml").scheduler
    given_blocks = {g.kv_cache_spec.block_size for g in kept.kv_cache_config.kv_cache_groups}
    assert kept.cache_config.block_size == max(given_blocks) == 256, "a block size the user gave is kept"


def test_prefill_steps_follow_vllms_chunking_for_the_runs_server(tmp_path):
    hybrid = _run_with(tmp_path, yaml.safe_load(HYBRID.read_text()))
    steps, note = prefill_steps(hybrid, [(54, 0), (144, 0), (700, 0), (700, 256)])
    assert "replayed" in note
    # 128-token boundaries inside a prompt, at most max_num_batched_tokens (256) a step: 144 = 128 + 16;
    # 700 = 256 + 256 + 128 + 60; with 256 cached, 256 .. 700 = 256 + 128 + 60.
    assert steps == [1, 2, 4, 3]
    llama = FIXTURE_RUN  # the small-KV llama: one chunk up to max_num_batched_tokens
    assert prefill_steps(llama, [(54, 0), (700, 0)])[0] == [1, 1]


def test_a_run_without_a_profile_counts_one_step_per_prompt(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": "oomkit.run/1", "run_id": "bare"}))
    steps, note = prefill_steps(run, [(144, 0)])
    assert steps is None and "one step per prompt" in note
    assert "replayed" in calibrate(FIXTURE_RUN).prefill_steps_note
