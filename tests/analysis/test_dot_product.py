"""The claim of seeds 000/002, measured: sinusoidal code dot products depend only on distance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.analysis import closed_form_dot, dot_by_distance, gram_matrix, translation_invariance
from posenc.functional import sinusoidal_table
from tests.reference.sinusoidal_loop import dot, sinusoidal_rows


@given(
    d_model=st.integers(1, 64).map(lambda k: 2 * k),
    seq_len=st.integers(2, 120),
    base=st.floats(min_value=1.5, max_value=1e6, allow_nan=False),
)
def test_dot_product_depends_only_on_distance_and_equals_sum_of_cosines(d_model, seq_len, base):
    table = sinusoidal_table(seq_len, d_model, base=base, dtype=torch.float64)
    distances = range(seq_len)
    dots = dot_by_distance(table, distances)
    expected = closed_form_dot(torch.arange(seq_len), d_model, base)  # [T]
    for distance, values in dots.items():
        assert values.shape == (seq_len - distance,)
        assert float((values - expected[distance]).abs().max()) <= 1e-12


def test_dot_by_distance_equals_the_loop_dot_products():
    rows = sinusoidal_rows(range(15), 8)
    dots = dot_by_distance(torch.tensor(rows, dtype=torch.float64), [1, 3, 14])
    for distance, values in dots.items():
        loop = [dot(rows[i], rows[i + distance]) for i in range(15 - distance)]
        torch.testing.assert_close(values, torch.tensor(loop, dtype=torch.float64), rtol=0, atol=1e-15)


def test_closed_form_is_the_sum_over_frequencies_of_cos_d_omega():
    omega = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    for distance in (0, 1, 3, 1000):
        assert float(closed_form_dot(distance, 8)) == pytest.approx(
            float(torch.cos(distance * omega).sum()), abs=1e-12
        )
    assert float(closed_form_dot(0, 64)) == 32.0  # each pair contributes sin² + cos² = 1
    assert closed_form_dot([1, 2, 3], 8).shape == (3,)


def test_gram_matrix_is_symmetric_toeplitz_for_sinusoidal_codes():
    gram = gram_matrix(sinusoidal_table(40, 16))
    assert gram.shape == (40, 40) and gram.dtype == torch.float64
    torch.testing.assert_close(gram, gram.T, rtol=0, atol=1e-12)
    for offset in range(40):
        diagonal = torch.diagonal(gram, offset)
        assert float(diagonal.max() - diagonal.min()) < 1e-5  # float32 table, float64 products


def test_float32_table_agrees_with_closed_form_to_1e_5_at_d_model_512():
    table = sinusoidal_table(4096, 512, dtype=torch.float32)
    dots = dot_by_distance(table, [1, 64, 1024])
    summaries = translation_invariance(dots, {d: float(closed_form_dot(d, 512)) for d in dots})
    assert max(s.max_deviation for s in summaries) <= 1e-5


def test_summary_reports_pairs_spread_and_deviation():
    table = sinusoidal_table(15, 8, dtype=torch.float64)
    dots = dot_by_distance(table, [1, 13])
    (one, thirteen) = translation_invariance(dots, {1: float(closed_form_dot(1, 8)), 13: 0.0})
    assert (one.distance, one.pairs, thirteen.pairs) == (1, 14, 2)
    assert one.spread < 1e-15 and one.max_deviation < 1e-15
    assert thirteen.max_deviation == pytest.approx(float(closed_form_dot(13, 8)), abs=1e-15)
    no_reference = translation_invariance(dots)
    assert no_reference[0].expected is None and no_reference[0].max_deviation is None


def test_a_learned_table_is_caught_failing_translation_invariance():
    table = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))  # a GPT-2-style table
    summaries = translation_invariance(dot_by_distance(table, [1, 5, 20]))
    assert min(s.spread for s in summaries) > 1.0


def test_a_sinusoidal_table_with_a_shuffled_column_is_caught():
    table = sinusoidal_table(64, 32, dtype=torch.float64)
    # Permuting columns would keep every dot product; shuffling one column's values over positions does not.
    shuffled = table.clone()
    shuffled[:, 0] = table[torch.randperm(64, generator=torch.Generator().manual_seed(0)), 0]
    expected = {d: float(closed_form_dot(d, 32)) for d in (1, 5)}
    intact = translation_invariance(dot_by_distance(table, [1, 5]), expected)
    broken = translation_invariance(dot_by_distance(shuffled, [1, 5]), expected)
    assert max(s.max_deviation for s in intact) < 1e-13
    assert min(s.max_deviation for s in broken) > 0.1


@pytest.mark.parametrize("distance", [-1, 15, 100])
def test_distances_outside_the_table_are_refused(distance):
    with pytest.raises(
        ValueError, match=f"distance must be in 0 … 14 for a table of 15 positions, got {distance}"
    ):
        dot_by_distance(sinusoidal_table(15, 8), [distance])


def test_tables_must_be_two_dimensional():
    with pytest.raises(
        ValueError, match=r"table must be a \[T, d\] tensor with one row per position, got \(2, 3, 4\)"
    ):
        gram_matrix(torch.zeros(2, 3, 4))


def test_closed_form_refuses_odd_d_model():
    with pytest.raises(ValueError, match="d_model must be even, got 7"):
        closed_form_dot(3, 7)
