"""`oomkit decide` with a real comparison (the ladder and cache-vs-context folders of one
investigation on the CPU testbed): the agent team, the shared request set, and which compared
modes count as a fix and which as a temporary degradation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_decide import requirements

from oomkit.decide import DecideOptions, decide

FIX = Path(__file__).parent / "fixtures" / "decide" / "investigation-small-kv"


def folders(tmp_path: Path) -> tuple[Path, Path]:
    ladder, comp = tmp_path / "ladder", tmp_path / "compare"
    shutil.copytree(FIX / "ladder", ladder)
    shutil.copytree(FIX / "compare", comp)
    for name in ("compare.json", "manifest.json"):  # the server ran in the ladder folder
        data = json.loads((comp / name).read_text())
        data["server_runs"] = {"baseline": str(ladder)}
        (comp / name).write_text(json.dumps(data))
    return ladder, comp


def edit(comp: Path, change) -> None:
    data = json.loads((comp / "compare.json").read_text())
    change(data)
    (comp / "compare.json").write_text(json.dumps(data))


def run(tmp_path, paths, team="production", **req):
    return decide(
        [str(p) for p in paths],
        str(requirements(tmp_path, **req)),
        DecideOptions(team=team, runs_dir=str(tmp_path / "d")),
    )


def test_agent_team_with_the_comparisons(tmp_path):
    d = run(tmp_path, folders(tmp_path), team="agent")
    crit = {c.key: c for c in d.criteria}
    assert crit["comparisons"].status == "done" and "retention: skipped" in crit["comparisons"].detail
    assert d.verdict == "expand" and d.numbers["capacity_concurrency"] == 2
    items = {i.key: i.status for i in d.checklist}
    assert items["same_request_set"] == "done" and items["prefix_caching"] == "done"
    # The compare cells at 4 and 2 dialogs are capacity evidence too.
    assert {p.concurrency for p in d.capacity.points if "compare.json" in p.source} == {4, 2}


def test_a_context_cut_that_holds_the_target_is_a_degradation_not_a_fix(tmp_path):
    ladder, comp = folders(tmp_path)
    edit(comp, lambda d: [c.update(preemptions=0.0) for c in d["cells"] if c["mode"] == "shorter-history"])
    d = run(tmp_path, [ladder, comp])
    assert d.verdict == "expand"
    assert any("shorter-history" in r and "temporary degradation, not a fix" in r for r in d.recommendations)


def test_a_server_side_change_that_holds_the_target_is_tune(tmp_path):
    ladder, comp = folders(tmp_path)

    def add_mode(d):
        d["modes"].append(
            {
                "name": "more-blocks",
                "factor": "num_gpu_blocks_override",
                "value": 24,
                "side": "server",
                "baseline_value": 12,
                "notes": [],
            }
        )
        base = next(c for c in d["cells"] if c["mode"] == "baseline")
        d["cells"].append({**base, "mode": "more-blocks", "label": "more-blocks#1", "preemptions": 0.0})

    edit(comp, add_mode)
    d = run(tmp_path, [ladder, comp])
    assert d.verdict == "tune" and "more-blocks (num_gpu_blocks_override 24) holds it" in d.summary
    assert d.recommendations[0].startswith("set num_gpu_blocks_override to 24")


def test_disabling_prefix_caching_needs_the_hit_rate_comparison(tmp_path):
    ladder, comp = folders(tmp_path)

    def add_mode(d):
        d["modes"].append(
            {
                "name": "no-prefix",
                "factor": "enable_prefix_caching",
                "value": False,
                "side": "server",
                "baseline_value": True,
                "notes": [],
            }
        )
        base = next(c for c in d["cells"] if c["mode"] == "baseline")
        d["cells"].append(
            {**base, "mode": "no-prefix", "label": "no-prefix#1", "preemptions": 0.0, "prefix_cache_hit_rate": 0.0}
        )

    edit(comp, add_mode)
    d = run(tmp_path, [ladder, comp])
    # The hit rate was measured in both modes, so the change may be recommended, with its numbers.
    assert d.verdict == "tune" and "enable_prefix_caching" in d.recommendations[0]


def test_disabling_prefix_caching_without_hit_rates_is_never_recommended(tmp_path):
    ladder, comp = folders(tmp_path)

    def add_mode(d):
        d["modes"].append(
            {
                "name": "no-prefix",
                "factor": "enable_prefix_caching",
                "value": False,
                "side": "server",
                "baseline_value": True,
                "notes": [],
            }
        )
        base = next(c for c in d["cells"] if c["mode"] == "baseline")
        d["cells"].append({**base, "mode": "no-prefix", "label": "no-prefix#1", "preemptions": 0.0})
        for c in d["cells"]:
            c["prefix_cache_hit_rate"] = None

    edit(comp, add_mode)
    d = run(tmp_path, [ladder, comp])
    assert d.verdict == "expand" and not any("enable_prefix_caching" in r for r in d.recommendations)
