"""The FIRE, Kerple, Sandwich and CoPE rows of `posenc bench attention` at tiny sizes: each agrees with its
float64 reference, a wrong one fails its check, CoPE's naive row steps aside where [b, h, i, j, d] would
not fit, and ``--only`` selects rows (the benchmark itself is not run here)."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import attention
from tests.bench.rows import assert_rows_agree_with_float64

ROWS = {
    attention.FIRE: "fire",
    attention.KERPLE: "kerple",
    attention.KERPLE_MATERIALISED: "kerple",
    attention.SANDWICH: "sandwich",
    attention.SANDWICH_MATERIALISED: "sandwich",
    attention.COPE: "cope",
    attention.COPE_NAIVE: "cope",
}


@pytest.fixture(scope="module")
def tiny():
    return attention._inputs(40, heads=2, d_head=8, batch=2)


def test_every_row_agrees_with_its_float64_reference_and_its_term_weighs(tiny):
    assert_rows_agree_with_float64(tiny, ROWS, weighs=1e-3)


def test_the_naive_cope_agrees_with_posencs_cope_closer_than_with_float64(tiny):
    runs = attention.newer_candidates(tiny)
    with torch.no_grad():
        difference = (runs[attention.COPE]() - runs[attention.COPE_NAIVE]()).abs().max()
    assert difference < 1e-5  # the same float32 counts, two ways of reading the table


def test_a_row_with_a_wrong_bias_fails_the_check(tiny, monkeypatch):
    expected = attention.reference(tiny, "kerple")
    encodings = attention.newer_encodings(2, 8)
    with torch.no_grad():
        for parameter in encodings["kerple"].parameters():
            parameter.mul_(2)  # the kernel's parameters doubled
    monkeypatch.setattr(attention, "newer_encodings", lambda heads, d_head: encodings)
    runs = attention.newer_candidates(tiny)
    with torch.no_grad(), pytest.raises(AssertionError, match="Kerple"):
        attention.check(attention.KERPLE, runs[attention.KERPLE](), expected, 40)


def test_copes_naive_row_is_skipped_where_too_large():
    assert attention.newer_not_run(1024) == {}
    assert attention.newer_not_run(2048) == {
        attention.COPE_NAIVE: "not run: its [b, h, i, j, d] tensor would hold 8 GiB"
    }


def test_only_selects_rows_and_keeps_the_reference_speed():
    names = attention.selected("Kerple|CoPE")
    assert names[0] == attention.UNBIASED
    assert set(names[1:]) == {
        attention.KERPLE,
        attention.KERPLE_MATERIALISED,
        attention.COPE,
        attention.COPE_NAIVE,
    }
    assert attention.selected(None) == list(attention.CANDIDATES)
    with pytest.raises(ValueError, match="matches no candidate"):
        attention.selected("nosuch")
    with pytest.raises(ValueError, match="not a regular expression"):
        attention.selected("(")
