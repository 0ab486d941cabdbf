"""Sweep axes: lists, ranges, steps; clear errors naming the flag; fixed expansion order."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dmocker.sweep.grid import AXES, GridError, config_label, expand, parse_axis

AX = {a.key: a for a in AXES}


@pytest.mark.parametrize(
    ("key", "text", "expect"),
    [
        ("prefill_workers", "1..4", (1, 2, 3, 4)),
        ("prefill_workers", "1,2,4", (1, 2, 4)),
        ("prefill_workers", "1..3,8", (1, 2, 3, 8)),
        ("prefill_workers", "2..8:2", (2, 4, 6, 8)),
        ("decode_workers", " 3 ", (3,)),
        ("rate", "10..40:10", (10.0, 20.0, 30.0, 40.0)),
        ("rate", "0.1..0.3:0.1", (0.1, 0.2, 0.3)),
        ("kv_transfer_bandwidth", "0,12.5,25", (0.0, 12.5, 25.0)),
        ("engine", "vllm,SGLang", ("vllm", "sglang")),
    ],
)
def test_parse(key: str, text: str, expect: tuple[object, ...]) -> None:
    assert parse_axis(AX[key], text) == expect


@pytest.mark.parametrize(
    ("key", "text", "expect"),
    [
        ("prefill_workers", "8..1", "--prefill-workers: bad range '8..1'"),
        ("prefill_workers", "1..", "--prefill-workers: bad range"),
        ("prefill_workers", "0..2", "--prefill-workers: 0 must be >= 1"),
        ("prefill_workers", "two", "--prefill-workers: 'two' is not an integer"),
        ("prefill_workers", "1.5", "not an integer"),
        ("prefill_workers", "1,,2", "empty item"),
        ("prefill_workers", "1,2,1", "given twice"),
        ("prefill_workers", "1..3:0", "bad range step"),
        ("prefill_workers", "1..100000", "at most"),
        ("rate", "10..40", "needs a step"),
        ("rate", "0", "--rate: 0 must be > 0"),
        ("rate", "nan", "not a finite number"),
        ("kv_transfer_bandwidth", "-1", "must be >= 0"),
        ("decode_workers", "", "empty value"),
    ],
)
def test_bad_values_name_the_flag(key: str, text: str, expect: str) -> None:
    with pytest.raises(GridError, match=None) as info:
        parse_axis(AX[key], text)
    assert expect in str(info.value)


def test_unknown_key() -> None:
    with pytest.raises(GridError, match="--vary bogus: no such configuration field"):
        expand({"bogus": (1,)})


def test_expansion_order_is_fixed_not_the_order_given() -> None:
    a = expand({"decode_workers": (1, 2), "prefill_workers": (3, 4)})
    b = expand({"prefill_workers": (3, 4), "decode_workers": (1, 2)})
    assert a == b
    assert a == [
        {"prefill_workers": 3, "decode_workers": 1}, {"prefill_workers": 3, "decode_workers": 2},
        {"prefill_workers": 4, "decode_workers": 1}, {"prefill_workers": 4, "decode_workers": 2},
    ]
    assert [list(c) for c in a] == [["prefill_workers", "decode_workers"]] * 4


@given(st.dictionaries(st.sampled_from([a.key for a in AXES if a.kind.value == "int"]),
                       st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True), max_size=3))
def test_product_size_and_membership(axes: dict[str, list[int]]) -> None:
    configs = expand({k: tuple(v) for k, v in axes.items()})
    size = 1
    for v in axes.values():
        size *= len(v)
    assert len(configs) == size
    assert len({tuple(sorted(c.items())) for c in configs}) == size
    for c in configs:
        assert all(c[k] in axes[k] for k in axes)


def test_label() -> None:
    assert config_label({"engine": "vllm", "prefill_workers": 2, "decode_workers": 3, "rate": 12.5}) == "2P+3D vllm rate=12.5"
