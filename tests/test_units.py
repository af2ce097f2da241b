"""oomkit.units: the size parser, ceiling division and the formatters every renderer uses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomkit.units import (
    GIB,
    KIB,
    MIB,
    NONE,
    cdiv,
    fmt_count,
    fmt_figure,
    fmt_gib,
    fmt_ms,
    fmt_number,
    fmt_pct,
    fmt_rate,
    fmt_s,
    fmt_size,
    fmt_tokens,
    fmt_value,
    parse_size,
    unit_of,
)


def test_constants_and_cdiv():
    assert (KIB, MIB, GIB) == (1024, 1024**2, 1024**3)
    assert [cdiv(a, 128) for a in (0, 1, 128, 129, 1536)] == [0, 1, 1, 2, 12]


@pytest.mark.parametrize(
    "text, n",
    [
        ("67108864", 67108864),
        ("64MiB", 64 * MIB),
        ("4 GiB", 4 * GIB),
        ("4gib", 4 * GIB),
        ("1.5Gi", int(1.5 * GIB)),
        ("20G", 20 * 1000**3),
        ("20GB", 20 * 1000**3),
        ("512k", 512_000),
        (" 2 TiB ", 2 * 1024**4),
    ],
)
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "GiB", "4 GB/s", "-1G", "1e9", "four"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError, match="is not a byte count"):
        parse_size(text)


@pytest.mark.parametrize(
    "x, text",
    [
        (1.0, "1"),
        (2.5, "2.5"),
        (0.698088294391182, "0.698"),
        (1950691328, "1950691328"),
        (-0.0001, "0"),
        (10.0004, "10"),
        (None, NONE),
        (True, "yes"),
    ],
)
def test_fmt_number(x, text):
    assert fmt_number(x) == text


def test_fmt_number_decimals_are_capped_at_three():
    assert fmt_number(3.14159265, 6) == "3.142" and fmt_number(3.14159265, 0) == "3"


def test_counts_percents_and_sizes():
    assert [fmt_count(x) for x in (1.0, 0.0, 4, 1.25, None)] == ["1", "0", "4", "1.2", NONE]
    assert fmt_pct(0.698088294391182) == "69.8%" and fmt_pct(1.0) == "100%" and fmt_pct(0.0) == "0%"
    assert fmt_pct(25.0, fraction=False) == "25%" and fmt_pct(-50.0, fraction=False) == "-50%"
    assert fmt_pct(0.125, signed=True) == "+12.5%" and fmt_pct(0.91, decimals=0) == "91%"
    assert fmt_gib(1950691328) == "1.82 GiB" and fmt_gib(None) == NONE
    assert [fmt_size(n) for n in (1950691328, 64 * MIB, 1536, 512)] == ["1.82 GiB", "64.00 MiB", "1.50 KiB", "512 B"]


def test_times_tokens_rates():
    assert [fmt_ms(v) for v in (779.4097, 10.0, 7.46, 0.04)] == ["779 ms", "10 ms", "7.5 ms", "0 ms"]
    assert [fmt_s(v) for v in (32.224, 0.351, 123.4)] == ["32.2 s", "0.35 s", "123 s"]
    assert fmt_tokens(1024) == "1024 tokens" and fmt_tokens(1.0) == "1 token" and fmt_tokens(None) == NONE
    assert fmt_rate(0.456) == "0.46 req/s" and fmt_rate(123.45, "tokens") == "123 tokens/s"


@pytest.mark.parametrize(
    "key, unit",
    [
        ("peak_memory_bytes", "bytes"),
        ("model_weights_gib", "gib"),
        ("reserve_pct", "percent"),
        ("ttft_ms_p95", "ms"),
        ("e2e_p95_ms", "ms"),
        ("ready_s", "s"),
        ("kv_cache_tokens", "tokens"),
        ("estimated_max_model_len", "tokens"),
        ("prefix_cache_hit_rate", "fraction"),
        ("max_kv_usage", "fraction"),
        ("agent_success_share", "fraction"),
        ("max_num_seqs", None),
        ("preemptions", None),
    ],
)
def test_unit_of(key, unit):
    assert unit_of(key) == unit


def test_fmt_figure_and_value():
    assert fmt_figure("ttft_ms_p95", 779.4097) == "779 ms" and fmt_figure("prefix_cache_hit_rate", 0.6907) == "69.1%"
    assert fmt_figure("kv_cache_device", "CPU") == "CPU" and fmt_figure("preemptions", 1.0) == "1"
    assert fmt_value(3.0, "count") == "3" and fmt_value(0.5, "no such unit") == "0.5" and fmt_value(None) == NONE


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_no_formatter_writes_more_than_three_decimals(x):
    texts = [fmt_number(x), fmt_count(x), fmt_pct(x), fmt_ms(x), fmt_s(x), fmt_gib(x), fmt_size(x), fmt_tokens(x)]
    assert not any(re.search(r"\d\.\d{4,}", t) for t in texts), texts
    assert not any("e+" in t or "e-" in t for t in texts), texts
