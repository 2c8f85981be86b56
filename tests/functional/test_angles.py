"""Exact angle reduction: congruent to pos·ω modulo 2π, small, exact to float64."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional.angles import (
    MAX_POSITION,
    PIECE_BITS,
    reduced_angles,
    split_exact,
    split_frequencies,
)


def significant_bits(x: float) -> int:
    if x == 0.0:
        return 0
    mantissa, _ = math.frexp(x)
    bits = 0
    while mantissa != int(mantissa):
        mantissa *= 2
        bits += 1
    return bits


@given(st.floats(min_value=1e-30, max_value=1e3, allow_nan=False))
def test_split_pieces_are_short_and_sum_back_exactly(value):
    pieces = split_frequencies(torch.tensor([value], dtype=torch.float64))[0].tolist()
    assert all(significant_bits(p) <= PIECE_BITS for p in pieces)
    assert math.fsum(pieces) == value


@given(st.floats(min_value=1e-30, max_value=1e3, allow_nan=False))
def test_decimal_split_sums_to_the_value_within_2_pow_minus_100(value):
    pieces = split_exact(value)
    assert all(significant_bits(p) <= PIECE_BITS for p in pieces)
    with mpmath.workdps(60):
        total = mpmath.fsum(mpmath.mpf(p) for p in pieces)
        assert abs(total - value) <= value * mpmath.mpf(2) ** -100


@given(
    position=st.integers(-(MAX_POSITION - 1), MAX_POSITION - 1),
    omega=st.floats(min_value=1e-9, max_value=2.0, allow_nan=False),
)
def test_reduced_angle_is_congruent_to_the_exact_angle(position, omega):
    angle = reduced_angles(
        torch.tensor([position]), split_frequencies(torch.tensor([omega], dtype=torch.float64))
    )
    value = float(angle[0, 0])
    assert abs(value) <= math.pi + 1e-6
    with mpmath.workdps(50):
        exact = mpmath.mpf(position) * mpmath.mpf(omega)
        two_pi = 2 * mpmath.pi
        residue = (mpmath.mpf(value) - exact) / two_pi
        off = abs(residue - mpmath.nint(residue)) * two_pi  # distance from a whole number of turns
    assert float(off) < 2e-15


def test_positions_past_the_exact_range_are_refused():
    pieces = split_frequencies(torch.tensor([1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=f"2\\^27 = {MAX_POSITION} for exact angles, got {MAX_POSITION}"):
        reduced_angles(torch.tensor([MAX_POSITION]), pieces)
