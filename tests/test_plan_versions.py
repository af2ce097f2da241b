"""The planner's version table (oomkit.plan.versions.ROWS): every row, what each release changed, and
the Behaviour each version gets from it."""

from __future__ import annotations

from dataclasses import fields

import pytest

from oomkit.plan.versions import KNOWN, ROWS, V0, Behaviour, behaviour, parse_version, rows_in_effect

FIELDS = {row.field for row in ROWS}
# Behaviour attribute read from each row field (the rest: same name)
ATTRIBUTE = {
    "sliding_window_in_flight": "sliding_in_flight_batches",
    "sliding_window_lookahead": "sliding_lookahead",
    "sliding_window_block": None,  # stated, not computed: the planner's kernels give block_size either way
}


def test_every_field_starts_at_the_first_release_and_changes_in_order():
    for name in FIELDS:
        rows = [r for r in ROWS if r.field == name]
        assert rows[0].since == V0, name
        sinces = [r.since for r in rows]
        assert sinces == sorted(sinces) and len(set(sinces)) == len(sinces), name
        assert all(r.source.strip() for r in rows), name


def test_every_row_is_read_by_behaviour():
    attributes = {f.name for f in fields(Behaviour)}
    for name in FIELDS:
        attribute = ATTRIBUTE.get(name, name)
        assert attribute is None or attribute in attributes, name


@pytest.mark.parametrize("version", KNOWN)
def test_behaviour_is_the_rows_in_effect(version):
    b, rows = behaviour(version, "cpu"), rows_in_effect(parse_version(version))
    assert set(rows) == FIELDS
    for name, row in rows.items():
        attribute = ATTRIBUTE.get(name, name)
        if attribute is None or name in ("sliding_window_in_flight", "extensible_kv"):
            continue
        assert getattr(b, attribute) == row.value, (version, name)
    assert b.extensible_kv is False  # CUDA only (see test_known_behaviours)
    assert b.sliding_in_flight_batches == (rows["sliding_window_in_flight"].since >= (0, 26))
    assert b.sources == tuple(r.source for r in rows.values())


@pytest.mark.parametrize(
    "version, platform, expected",
    [
        ("0.6", "cuda", dict(engine="v0", default_gmu=0.9, tokens_formula="blocks", null_block_reserved=False)),
        ("0.11", "cuda", dict(engine="v1", tokens_formula="blocks_per_group", concurrency_formula="approx_groups")),
        ("0.17", "cuda", dict(default_gmu=0.9, mamba_cache_mode_prefix="all", cudagraphs_charged=False)),
        ("0.20", "cuda", dict(default_gmu=0.92, cudagraphs_charged=False)),
        ("0.21", "cuda", dict(cudagraphs_charged=True, tokens_formula="concurrency_x_len")),
        ("0.27", "cuda", dict(concurrency_formula="sum_of_groups", sliding_in_flight_batches=True)),
        ("0.29", "cuda", dict(sink_blocks_reserved=True, sink_manager_starts=True, sliding_lookahead=True)),
        ("0.30", "cuda", dict(sink_blocks_reserved=False, sink_manager_starts=False, null_block_reserved=False)),
        ("0.32", "cuda", dict(null_block_reserved=True, mamba_cache_mode_prefix="align", default_block_size=16)),
        ("0.33", "cuda", dict(default_gmu=0.92, default_block_size=16, extensible_kv=False)),
        ("0.34", "cuda", dict(default_gmu=1.0, default_block_size=64, extensible_kv=True)),
        ("0.34", "cpu", dict(default_gmu=0.92, extensible_kv=False)),
    ],
)
def test_known_behaviours(version, platform, expected):
    b = behaviour(version, platform)
    assert {k: getattr(b, k) for k in expected} == expected


def test_what_0_33_and_0_34_changed_in_sliding_windows_and_sinks():
    """Compared with 0.32 (kv_cache_interface.py SlidingWindowSpec / SinkFullAttentionSpec, kv_cache_utils.py
    and 0.33's kv_cache_planning.py, single_type_kv_cache_manager.py, attention.py, arg_utils.py,
    config/vllm.py): only the sliding-window block choice changed (0.34), and 0.34 reads the same
    speculative lookahead from another place."""
    later = {(r.field, r.since) for r in ROWS if r.since > (0, 32) and r.field.startswith(("sliding", "sink"))}
    assert later == {("sliding_window_block", (0, 34)), ("sliding_window_lookahead", (0, 34))}
    at = {v: rows_in_effect(parse_version(v)) for v in ("0.32", "0.33", "0.34")}
    assert all(at["0.33"][f] == at["0.32"][f] for f in FIELDS if f.startswith(("sliding", "sink")))
    assert at["0.34"]["sliding_window_lookahead"].value == at["0.32"]["sliding_window_lookahead"].value
    assert at["0.34"]["sliding_window_block"].value != at["0.32"]["sliding_window_block"].value
    for name in ("sliding_window_in_flight", "sink_blocks_reserved", "sink_manager_starts"):
        assert at["0.34"][name] == at["0.32"][name], name
