"""ALiBi slopes and biases against float64 loops written from the paper, their properties and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional.alibi import alibi_bias, alibi_slopes
from tests.reference.bias_loop import alibi_bias_loop, alibi_slopes_mpt, alibi_slopes_paper

SLOPE_RTOL = 1e-15  # torch.exp2 vs math.pow on the same exact exponent: a couple of float64 ulps at most


# --- slopes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_heads", range(1, 131))
def test_paper_slopes_match_the_loop_for_every_head_count(n_heads):
    slopes = alibi_slopes(n_heads)
    assert slopes.dtype == torch.float64
    assert slopes.shape == (n_heads,)
    expected = torch.tensor(alibi_slopes_paper(n_heads), dtype=torch.float64)
    torch.testing.assert_close(slopes, expected, rtol=SLOPE_RTOL, atol=0)


@pytest.mark.parametrize("bias_max", [1.0, 4.0, 8.0, 12.5, 16.0])
@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 48, 64, 71])
def test_bias_max_slopes_match_the_mpt_loop(n_heads, bias_max):
    slopes = alibi_slopes(n_heads, bias_max=bias_max)
    assert slopes.dtype == torch.float64
    expected = torch.tensor(alibi_slopes_mpt(n_heads, bias_max), dtype=torch.float64)
    torch.testing.assert_close(slopes, expected, rtol=SLOPE_RTOL, atol=0)


@pytest.mark.parametrize("n_heads", range(1, 131))
def test_both_rules_agree_for_bias_max_8_at_every_head_count(n_heads):
    # Not only for powers of two: with B = 8 and n₂ = 2n, MPT's slopes[1::2] are 2^(−8k/n) (the paper's
    # first n) and its slopes[::2] the odd-indexed slopes of 2n (the paper's extra ones), in that order.
    assert torch.equal(alibi_slopes(n_heads, bias_max=8), alibi_slopes(n_heads))


@pytest.mark.parametrize("n_heads", [1, 3, 8, 12, 40])
def test_other_bias_max_values_give_other_slopes(n_heads):
    slopes = alibi_slopes(n_heads, bias_max=16)
    assert not torch.equal(slopes, alibi_slopes(n_heads))
    assert slopes.min() >= 2.0**-16


def test_paper_slopes_of_8_heads_are_the_halving_sequence():
    assert torch.equal(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)], dtype=torch.float64))


def test_paper_slopes_of_12_heads_interleave_the_16_head_sequence():
    # the 8-head slopes 2^-1 … 2^-8, then 2^(-8k/16) for k = 1, 3, 5, 7
    expected = [2.0**-k for k in range(1, 9)] + [2.0 ** (-k / 2) for k in (1, 3, 5, 7)]
    torch.testing.assert_close(
        alibi_slopes(12), torch.tensor(expected, dtype=torch.float64), rtol=SLOPE_RTOL, atol=0
    )


@given(st.integers(1, 300))
def test_paper_slopes_are_in_0_1_and_distinct(n_heads):
    slopes = alibi_slopes(n_heads)
    assert ((slopes > 0) & (slopes < 1)).all()
    assert slopes.unique().numel() == n_heads
    assert slopes.min() >= 2.0**-8


# --- bias ------------------------------------------------------------------------------------------

positions_1d = st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=9)


@given(
    q=positions_1d,
    k=positions_1d,
    slopes=st.lists(st.floats(1e-6, 4.0), min_size=1, max_size=5),
    symmetric=st.booleans(),
)
def test_bias_matches_the_loop(q, k, slopes, symmetric):
    bias = alibi_bias(
        torch.tensor(q),
        torch.tensor(k),
        torch.tensor(slopes, dtype=torch.float64),
        symmetric=symmetric,
        dtype=torch.float64,
    )
    expected = torch.tensor(alibi_bias_loop(q, k, slopes, symmetric=symmetric), dtype=torch.float64)
    assert bias.shape == (len(slopes), len(q), len(k))
    # one float64 product of the same two numbers on both sides: identical
    torch.testing.assert_close(bias, expected, rtol=0, atol=0)


@pytest.mark.parametrize("bias_max", [None, 8.0, 16.0])
@pytest.mark.parametrize("n_heads", [1, 5, 12])
def test_head_count_uses_alibi_slopes(n_heads, bias_max):
    bias = alibi_bias(6, 6, n_heads, bias_max=bias_max, dtype=torch.float64)
    slopes = alibi_slopes(n_heads, bias_max=bias_max)
    expected = torch.tensor(alibi_bias_loop(range(6), range(6), slopes.tolist()), dtype=torch.float64)
    torch.testing.assert_close(bias, expected, rtol=0, atol=0)


def test_small_causal_example():
    bias = alibi_bias(3, 3, torch.tensor([0.5]), dtype=torch.float64)
    expected = torch.tensor([[[0.0, 0.5, 1.0], [-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]], dtype=torch.float64)
    assert torch.equal(bias, expected)


@pytest.mark.parametrize(
    ("q", "k", "shape"),
    [
        (torch.arange(5), torch.arange(7), (4, 5, 7)),
        (5, 7, (4, 5, 7)),
        (torch.arange(10).view(2, 5), torch.arange(7), (2, 4, 5, 7)),
        (torch.arange(5), torch.arange(14).view(2, 7), (2, 4, 5, 7)),
        (torch.arange(10).view(2, 5), torch.arange(14).view(2, 7), (2, 4, 5, 7)),
        (torch.tensor([[9]]), torch.arange(10).view(1, 10), (1, 4, 1, 10)),  # one decode step
    ],
)
def test_shapes(q, k, shape):
    assert alibi_bias(q, k, 4).shape == shape


def test_batched_positions_give_each_sequence_its_own_bias():
    q = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 1]])  # second row: left padding
    k = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    bias = alibi_bias(q, k, 6, dtype=torch.float64)
    for b in range(2):
        assert torch.equal(bias[b], alibi_bias(q[b], k[b], 6, dtype=torch.float64))
    one_sided = alibi_bias(q, torch.arange(4), 6, dtype=torch.float64)
    for b in range(2):
        assert torch.equal(one_sided[b], alibi_bias(q[b], torch.arange(4), 6, dtype=torch.float64))


def test_symmetric_equals_causal_where_the_key_is_not_after_the_query():
    causal = alibi_bias(12, 12, 8, dtype=torch.float64)
    symmetric = alibi_bias(12, 12, 8, symmetric=True, dtype=torch.float64)
    seen = torch.ones(12, 12, dtype=torch.bool).tril()  # j ≤ i
    assert torch.equal(symmetric[:, seen], causal[:, seen])
    assert torch.equal(symmetric, symmetric.transpose(-1, -2))
    assert torch.equal(causal, -causal.transpose(-1, -2))
    assert (symmetric <= 0).all()
    assert (causal[:, ~seen] > 0).all()  # keys after the query: positive, for the causal mask to remove


@given(st.lists(st.integers(-5000, 5000), min_size=1, max_size=12), st.integers(1, 20))
def test_causal_rows_differ_from_m_times_key_position_by_a_constant(positions, n_heads):
    k = torch.tensor(positions)
    q = torch.arange(-3, 9)
    bias = alibi_bias(q, k, n_heads, dtype=torch.float64)  # [h, i, j]
    m = alibi_slopes(n_heads)[:, None, None]
    difference = bias - m * k.double()  # [h, i, j]
    # the constant of row i is −m·q_i: softmax sees the same row as m·k_j (BLOOM's and MPT's form)
    torch.testing.assert_close(
        difference, (-m * q.double()[:, None]).expand_as(difference), rtol=1e-15, atol=1e-9
    )
    torch.testing.assert_close(difference, difference[..., :1].expand_as(difference), rtol=0, atol=1e-9)


def test_float32_output_is_the_float64_bias_cast_once():
    q, k = torch.arange(1000, 1040), torch.arange(0, 1040)
    bias = alibi_bias(q, k, 12)
    assert bias.dtype == torch.float32
    assert torch.equal(bias, alibi_bias(q, k, 12, dtype=torch.float64).to(torch.float32))
    assert alibi_bias(q, k, 12, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_slopes_tensor_of_any_real_dtype_is_used_as_float64():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float32)
    assert torch.equal(
        alibi_bias(4, 4, slopes, dtype=torch.float64), alibi_bias(4, 4, slopes.double(), dtype=torch.float64)
    )


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: alibi_slopes(0), ValueError, "n_heads must be positive, got 0"),
        (lambda: alibi_slopes(-3), ValueError, "n_heads must be positive, got -3"),
        (lambda: alibi_slopes(8.0), TypeError, "n_heads must be an integer, got 8.0"),
        (lambda: alibi_slopes(True), TypeError, "n_heads must be an integer, got True"),
        (lambda: alibi_slopes(8, bias_max=0), ValueError, "bias_max must be positive and finite, got 0.0"),
        (
            lambda: alibi_slopes(8, bias_max=-8.0),
            ValueError,
            "bias_max must be positive and finite, got -8.0",
        ),
        (
            lambda: alibi_slopes(8, bias_max=math.inf),
            ValueError,
            "bias_max must be positive and finite, got inf",
        ),
        (lambda: alibi_slopes(8, bias_max="8"), TypeError, "bias_max must be a real number, got '8'"),
        (
            lambda: alibi_bias(4, 4, torch.ones(2), bias_max=8.0),
            ValueError,
            "bias_max sets the slopes: pass a head count",
        ),
        (lambda: alibi_bias(4, 4, 0), ValueError, "slopes as a head count must be positive, got 0"),
        (
            lambda: alibi_bias(4, 4, 2.0),
            TypeError,
            "slopes must be a tensor [h] or an int head count, got 2.0",
        ),
        (lambda: alibi_bias(4, 4, torch.ones(2, 2)), ValueError, "slopes must be a 1-d tensor [h]"),
        (lambda: alibi_bias(4, 4, torch.ones(0)), ValueError, "slopes must be a 1-d tensor [h] with h ≥ 1"),
        (
            lambda: alibi_bias(torch.tensor([0.0, 1.0]), 4, 2),
            ValueError,
            "positions must be integers, got dtype torch.float32",
        ),
        (lambda: alibi_bias(0, 4, 2), ValueError, "length must be positive, got 0"),
        (
            lambda: alibi_bias(torch.zeros(2, 2, 2, dtype=torch.long), 4, 2),
            ValueError,
            "q_positions must be [n] or [b, n], got shape (2, 2, 2)",
        ),
        (
            lambda: alibi_bias(4, torch.tensor(3), 2),
            ValueError,
            "k_positions must be [n] or [b, n], got shape ()",
        ),
        (
            lambda: alibi_bias(torch.zeros(2, 4, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long), 2),
            ValueError,
            "q_positions and k_positions must have the same batch size, got 2 and 3",
        ),
        (lambda: alibi_bias(4, 4, 2, dtype=torch.int64), TypeError, "dtype must be a floating-point"),
        (
            lambda: alibi_bias(4, 4, torch.tensor([0.5, float("inf")])),
            ValueError,
            "slopes must be finite, got [0.5, inf]",
        ),
        (
            lambda: alibi_bias(4, 4, torch.tensor([float("nan")])),
            ValueError,
            "slopes must be finite, got [nan]",
        ),
        (  # k − q would wrap around in int64 and give a bias of the wrong sign
            lambda: alibi_bias(torch.tensor([2**62 + 1]), torch.tensor([-(2**62)]), 1),
            ValueError,
            "q_positions must lie within ±2^62 so that distances fit in int64, got 4611686018427387905",
        ),
        (
            lambda: alibi_bias(torch.tensor([0]), torch.tensor([-(2**63)]), 1),
            ValueError,
            "k_positions must lie within ±2^62 so that distances fit in int64, got -9223372036854775808",
        ),
    ],
)
def test_bad_input_raises_naming_the_value(call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)
