"""The Shaw and Transformer-XL rows of `posenc bench attention` at tiny sizes: each agrees with float64, a
wrong one fails its check, the naive ones step aside where [b, h, i, j, d] would not fit, and the sweep
tries them from shorter lengths (the benchmark itself is not run here)."""

from __future__ import annotations

import functools

import pytest
import torch

from posenc.bench import attention
from tests.bench.rows import assert_rows_agree_with_float64

ROWS = {
    attention.SHAW: "shaw",
    attention.SHAW_VALUES: "shaw_values",
    attention.SHAW_NAIVE: "shaw",
    attention.TRANSFORMER_XL: "transformer_xl",
    attention.TRANSFORMER_XL_NAIVE: "transformer_xl",
}


@pytest.fixture(scope="module")
def tiny():
    return attention._inputs(40, heads=2, d_head=8, batch=2)


def test_every_row_agrees_with_its_float64_reference_and_the_terms_weigh(tiny):
    assert_rows_agree_with_float64(tiny, ROWS, weighs=1e-2)


def test_a_row_with_a_wrong_term_fails_the_check(tiny, monkeypatch):
    expected = attention.reference(tiny, "transformer_xl")
    encodings = attention.relative_encodings(2, 8)
    with torch.no_grad():
        encodings["transformer_xl"].u.zero_()  # the content bias u·k_j left out
    monkeypatch.setattr(attention, "relative_encodings", lambda heads, d_head: encodings)
    runs = attention.relative_candidates(tiny)
    with torch.no_grad(), pytest.raises(AssertionError, match="Transformer-XL terms"):
        attention.check(attention.TRANSFORMER_XL, runs[attention.TRANSFORMER_XL](), expected, 40)


def test_the_naive_rows_are_skipped_where_too_large_and_swept_from_shorter_lengths():
    assert attention.relative_not_run(1024) == {}  # 8 heads × 1024² × 64 float32: 2 GiB
    assert attention.relative_not_run(2048) == dict.fromkeys(
        attention.RELATIVE_NAIVE, "not run: its [b, h, i, j, d] tensor would hold 8 GiB"
    )
    assert attention.sweep_lengths(attention.SHAW_NAIVE, (4096, 8192)) == [1024, 1536, 2048, 3072, 4096, 8192]
    assert attention.sweep_lengths(attention.SHAW, (4096, 8192)) == [4096, 8192]
    assert attention.sweep_lengths(attention.TRANSFORMER_XL_NAIVE, ()) == []


def test_a_case_times_the_rows_and_reports_the_skipped_naive_ones(monkeypatch):
    monkeypatch.setattr(attention, "NAIVE_LIMIT_BYTES", 1 << 20)  # 1 MiB: 8 heads of 64 at s=64 need 8 MiB
    monkeypatch.setattr(attention, "_inputs", functools.partial(attention._inputs, heads=2, d_head=8))
    with torch.no_grad():
        case, _ = attention._case(64, rounds=1, compile=False, memory=None)
    timed = {t["name"]: t for t in case["timings"]}
    for name in (attention.SHAW, attention.SHAW_VALUES, attention.TRANSFORMER_XL):
        assert timed[name]["max_abs_error_vs_float64"] <= attention.TOLERANCE and timed[name]["median_ms"] > 0
    for name in attention.RELATIVE_NAIVE:
        assert name not in timed
        assert case["not_timed"][name].startswith("not run: its [b, h, i, j, d] tensor")


def test_the_sweep_measures_a_relative_row_in_a_subprocess(monkeypatch):
    monkeypatch.setattr(attention, "NAIVE_SWEEP", (16,))
    outcome = attention.sweep([attention.SHAW_NAIVE], (32,), compile=False)[attention.SHAW_NAIVE]
    assert [run["seq_len"] for run in outcome["runs"]] == [16, 32]
    assert all(run["ok"] and run["peak_extra_mib"] >= 0 for run in outcome["runs"])
    assert outcome["longest_completed"] == 32 and outcome["stopped_by"] is None
