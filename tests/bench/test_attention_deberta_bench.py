"""The DeBERTa rows of `posenc bench attention` agree with float64 at a tiny size; the naive one steps aside
where its [b, h, i, j, d] tensor would not fit (the benchmark itself is not run here)."""

from __future__ import annotations

import functools

import pytest
import torch

from posenc.bench import attention


@pytest.fixture(scope="module")
def tiny():
    return attention._inputs(48, heads=2, d_head=8, batch=2)


def test_both_deberta_rows_agree_with_the_float64_reference(tiny):
    expected = attention.reference(tiny, "deberta")
    runs = attention.candidates(tiny, compile=False)
    for name in attention.DEBERTA_CANDIDATES:
        with torch.no_grad():
            assert attention.check(name, runs[name](), expected, 48) < attention.TOLERANCE
    # the position terms weigh: without them the output is far from DeBERTa's
    plain = attention.reference(tiny, "none")
    assert (plain - expected).abs().max() > 1e-2


def test_a_deberta_row_with_a_wrong_term_fails_the_check(tiny, monkeypatch):
    expected = attention.reference(tiny, "deberta")
    layer = attention.deberta_layer(2, 8)
    monkeypatch.setattr(attention, "deberta_layer", lambda heads, d_head: layer)
    monkeypatch.setattr(type(layer.encoding), "scale_factor", property(lambda self: 2))  # √(2d), not √(3d)
    with torch.no_grad(), pytest.raises(AssertionError, match="DeBERTa c2p"):
        attention.check(
            attention.DEBERTA, attention.deberta_candidates(tiny)[attention.DEBERTA](), expected, 48
        )


def test_the_deberta_rows_are_listed_and_the_naive_one_skipped_where_too_large():
    assert list(attention.DEBERTA_CANDIDATES) == [attention.DEBERTA, attention.DEBERTA_NAIVE]
    assert set(attention.DEBERTA_CANDIDATES) <= set(attention.CANDIDATES)
    assert attention.deberta_not_run(1024) == {}  # 8 heads × 1024² × 64 float32: 2 GiB
    assert attention.deberta_not_run(2048) == {
        attention.DEBERTA_NAIVE: "not run: its [b, h, i, j, d] tensor would hold 8 GiB"
    }


def test_a_case_reports_the_skipped_naive_row_as_not_timed(monkeypatch):
    monkeypatch.setattr(attention, "NAIVE_LIMIT_BYTES", 1 << 20)  # 1 MiB: 8 heads of 64 at s=64 need 8 MiB
    monkeypatch.setattr(attention, "_inputs", functools.partial(attention._inputs, heads=2, d_head=8))
    with torch.no_grad():
        case, _ = attention._case(64, rounds=1, compile=False, memory=None)
    names = [t["name"] for t in case["timings"]]
    assert attention.DEBERTA in names and attention.DEBERTA_NAIVE not in names
    assert case["not_timed"][attention.DEBERTA_NAIVE].startswith("not run: its [b, h, i, j, d] tensor")
