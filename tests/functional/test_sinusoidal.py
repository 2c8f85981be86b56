"""sinusoidal_table against the seed formulas, at float64 and at every dtype's last bit."""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional import MAX_POSITION, sinusoidal_frequencies, sinusoidal_table
from tests.reference.sinusoidal_loop import sinusoidal_columns, sinusoidal_exact, sinusoidal_rows


def ulp(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype` numbers around each float64 value (subnormals included)."""
    info = torch.finfo(dtype)
    mantissa_bits = -torch.log2(torch.tensor(info.eps, dtype=torch.float64))
    exponent = torch.floor(torch.log2(exact.abs().clamp_min(info.tiny)))
    return torch.maximum(2.0 ** (exponent - mantissa_bits), torch.tensor(info.smallest_normal * info.eps))


@pytest.mark.parametrize(("length", "d_model", "base"), [(15, 8, 10000.0), (50, 64, 10000.0), (33, 6, 500.0)])
def test_rows_layout_matches_float64_loop_reference(length, d_model, base):
    table = sinusoidal_table(length, d_model, base=base, dtype=torch.float64)
    reference = torch.tensor(sinusoidal_rows(range(length), d_model, base), dtype=torch.float64)
    assert table.shape == (length, d_model)
    torch.testing.assert_close(table, reference, rtol=0, atol=1e-13)


@pytest.mark.parametrize(("length", "d_model"), [(15, 8), (40, 32)])
def test_columns_layout_is_the_seed_matrix_P(length, d_model):
    matrix = sinusoidal_table(length, d_model, dtype=torch.float64, layout="columns")
    reference = torch.tensor(sinusoidal_columns(length, d_model), dtype=torch.float64)
    assert matrix.shape == (d_model, length)
    assert matrix.is_contiguous()
    torch.testing.assert_close(matrix, reference, rtol=0, atol=1e-13)


def test_even_columns_are_sines_and_odd_columns_cosines():
    table = sinusoidal_table(4, 10, dtype=torch.float64)
    assert torch.equal(table[0, 0::2], torch.zeros(5, dtype=torch.float64))
    assert torch.equal(table[0, 1::2], torch.ones(5, dtype=torch.float64))
    assert table[1, 0] == pytest.approx(torch.sin(torch.tensor(1.0, dtype=torch.float64)).item(), abs=1e-16)


def test_explicit_positions_select_rows_of_the_arange_table():
    full = sinusoidal_table(100, 32)
    positions = torch.tensor([[3, 4, 5], [0, 99, 7]])
    table = sinusoidal_table(positions, 32)
    assert table.shape == (2, 3, 32)
    assert torch.equal(table, full[positions])
    assert torch.equal(sinusoidal_table([3, 4, 5], 32), full[3:6])


def test_negative_positions_follow_the_parity_of_sine_and_cosine():
    positive = sinusoidal_table(torch.arange(1, 50), 16, dtype=torch.float64)
    negative = sinusoidal_table(-torch.arange(1, 50), 16, dtype=torch.float64)
    torch.testing.assert_close(negative[:, 0::2], -positive[:, 0::2], rtol=0, atol=0)
    torch.testing.assert_close(negative[:, 1::2], positive[:, 1::2], rtol=0, atol=0)


def test_frequencies_are_base_to_the_minus_2k_over_d():
    omega = sinusoidal_frequencies(512)
    expected = 10000.0 ** (-torch.arange(0, 512, 2, dtype=torch.float64) / 512)
    torch.testing.assert_close(omega, expected, rtol=4e-16, atol=0)


# Positions up to 2^21 (plus the edges), compared with a 40-digit mpmath table.
SAMPLED_POSITIONS = [0, 1, 2, 3, 1000, 65535, 65536, 2**20 - 1, 2**20, 2**21 - 1, 2**21] + torch.randint(
    0, 2**21 + 1, (40,), generator=torch.Generator().manual_seed(0)
).tolist()


@pytest.fixture(scope="module")
def exact_table():
    rows = sinusoidal_exact(SAMPLED_POSITIONS, 128)
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_value_is_within_one_rounding_of_its_dtype_up_to_2_pow_21(exact_table, dtype):
    table = sinusoidal_table(torch.tensor(SAMPLED_POSITIONS), 128, dtype=dtype).to(torch.float64)
    error = (table - exact_table).abs()
    # Correct rounding is within half a unit in the last place; the float64 reference itself is
    # one float64 rounding off the 40-digit value, hence the 1e-15 slack.
    assert bool((error <= 0.5 * ulp(exact_table, dtype) + 1e-15).all()), float(
        (error / ulp(exact_table, dtype)).max()
    )


def test_float64_values_are_within_a_few_float64_roundings_up_to_2_pow_21(exact_table):
    table = sinusoidal_table(torch.tensor(SAMPLED_POSITIONS), 128, dtype=torch.float64)
    assert float((table - exact_table).abs().max()) <= 1e-15


def test_the_float32_angle_recipe_is_what_exact_reduction_avoids(exact_table):
    positions = torch.tensor(SAMPLED_POSITIONS, dtype=torch.float32)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float32) / 128)
    angles = positions * inv_freq  # [n, 64], the usual float32 recipe
    recipe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).to(torch.float64)
    assert float((recipe - exact_table).abs().max()) > 1e-2


def _fastest_seconds(functions, rounds: int = 9) -> list[float]:
    """The fastest of ``rounds`` alternating runs of each function: the least disturbed by other load."""
    best = [float("inf")] * len(functions)
    for _ in range(rounds):
        for index, fn in enumerate(functions):
            start = time.perf_counter()
            fn()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def test_a_4096_by_512_table_costs_a_small_multiple_of_the_plain_float64_recipe():
    # the exact angle reduction must stay vectorised: docs/BENCHMARKS.md measures 1.3× the plain
    # float64 recipe; a per-position Python loop would be hundreds of times slower
    positions = torch.arange(4096, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, 512, 2, dtype=torch.float64) / 512)

    def plain() -> torch.Tensor:
        angle = positions * omega  # [T, d/2]
        return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2).float()

    exact, recipe = _fastest_seconds([lambda: sinusoidal_table(4096, 512), plain])
    assert exact < 10 * recipe, f"{exact * 1e3:.1f} ms against the plain recipe's {recipe * 1e3:.1f} ms"


@given(
    d_model=st.integers(1, 64).map(lambda k: 2 * k),
    positions=st.lists(st.integers(-(2**26), 2**26), min_size=1, max_size=8),
)
def test_any_integer_positions_give_bounded_sin_cos_pairs(d_model, positions):
    table = sinusoidal_table(positions, d_model, dtype=torch.float64)
    assert table.shape == (len(positions), d_model)
    assert float(table.abs().max()) <= 1.0
    norms = table[:, 0::2] ** 2 + table[:, 1::2] ** 2  # sin² + cos² per frequency
    torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=4e-16)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 7}, ValueError, "d_model must be even, got 7"),
        ({"d_model": 0}, ValueError, "d_model must be positive, got 0"),
        ({"d_model": -4}, ValueError, "d_model must be positive, got -4"),
        ({"d_model": 8.0}, TypeError, "d_model must be an integer, got 8.0"),
        ({"base": 0.0}, ValueError, "base must be positive and finite, got 0.0"),
        ({"base": -10.0}, ValueError, "base must be positive and finite, got -10.0"),
        ({"base": float("inf")}, ValueError, "base must be positive and finite, got inf"),
        (
            {"layout": "diagonal"},
            ValueError,
            "layout must be one of 'rows', 'columns', 'mae', 'axes'; got 'diagonal'",
        ),
        ({"dtype": torch.int32}, TypeError, "dtype must be a floating-point torch.dtype, got torch.int32"),
        ({"positions_or_length": 0}, ValueError, "length must be positive, got 0"),
        ({"positions_or_length": -3}, ValueError, "length must be positive, got -3"),
        (
            {"positions_or_length": torch.tensor([0.0, 1.5])},
            ValueError,
            "positions must be integers, got dtype torch.float32",
        ),
        ({"positions_or_length": [0, 1.5]}, ValueError, "positions must be integers"),
        ({"positions_or_length": torch.tensor([MAX_POSITION])}, ValueError, f"got {MAX_POSITION}"),
    ],
)
def test_bad_input_raises_naming_the_value(kwargs, error, message):
    arguments = {"positions_or_length": 8, "d_model": 8} | kwargs
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        sinusoidal_table(arguments.pop("positions_or_length"), arguments.pop("d_model"), **arguments)
