"""The rotation properties as measured numbers, and planted violations they catch."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.analysis import (
    angle_error,
    linear_map_residual,
    norm_change,
    relative_logit_deviation,
    rotation_matrix,
    sinusoidal_shift_matrix,
)
from posenc.encodings import PositionalEncoding
from posenc.functional import apply_rope, rope_inv_freq, sinusoidal_table


class PerPositionFrequencies(PositionalEncoding):
    """A broken RoPE: rotation angles drawn at random per position, not pos·θ_k."""

    kind = "rotary"

    def __init__(self, d_head: int, max_len: int = 200_000):
        super().__init__()
        self.angles = (
            torch.rand(max_len, d_head // 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
            * 6.3
        )

    def rotate(self, q, k, q_positions=None, k_positions=None):
        def one(x, positions):
            angles = self.angles[positions]
            return apply_rope(x, torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype))

        return one(q, q_positions), one(k, k_positions)


def test_rope_logits_depend_only_on_relative_position():
    for layout in ("half", "interleaved"):
        assert relative_logit_deviation(posenc.build("rope", d_head=64, layout=layout), d_head=64) < 1e-12


def test_random_per_position_angles_fail_the_relative_test():
    assert relative_logit_deviation(PerPositionFrequencies(32), d_head=32) > 1.0


def test_rope_preserves_norms():
    assert norm_change(posenc.build("rope", d_head=64), d_head=64) < 1e-13


def test_sinusoidal_shift_is_the_block_diagonal_rotation():
    table = sinusoidal_table(300, 64, dtype=torch.float64)
    for offset in (1, 7, 250):
        assert linear_map_residual(table, offset, sinusoidal_shift_matrix(offset, 64)) < 2e-15
    assert sinusoidal_shift_matrix(3, 8).shape == (8, 8)


def test_a_shuffled_column_fails_the_linear_map():
    table = sinusoidal_table(300, 64, dtype=torch.float64)
    shuffled = table.clone()
    shuffled[:, 5] = table[torch.randperm(300, generator=torch.Generator().manual_seed(0)), 5]
    assert linear_map_residual(shuffled, 7, sinusoidal_shift_matrix(7, 64)) > 0.1


def test_angle_error_compares_recipes_across_positions():
    inv_freq, _ = rope_inv_freq(128)
    positions = torch.tensor([10, 2**16, 2**20, 2**21])
    ours, theirs = angle_error("posenc", positions, inv_freq), angle_error("float32", positions, inv_freq)
    assert ours.shape == (4,) and bool((ours <= 1.2e-7).all())
    assert float(theirs[0]) < 1e-5 < float(theirs[-1])  # the float32 recipe degrades with position


@pytest.mark.parametrize("offset", [-1, 0, 10, 11])
def test_an_offset_outside_the_table_is_refused_by_name(offset):
    # −1 compared PE(T − 1) with M·PE(0) and returned a number; 0 and ≥ T failed inside torch
    table = sinusoidal_table(10, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"offset must lie in 1 … 9 .*got {offset}$"):
        linear_map_residual(table, offset, sinusoidal_shift_matrix(1, 8))


def test_an_unknown_angle_recipe_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="recipe must be one of 'posenc', 'float32'; got 'float16'"):
        angle_error("float16", torch.arange(3), torch.ones(2))


def test_a_rotation_matrix_narrower_than_its_pairs_is_refused():
    with pytest.raises(ValueError, match="width must be at least r = 8 .*got 4"):
        rotation_matrix(torch.zeros(4), width=4)
    assert rotation_matrix(torch.zeros(4), width=10).shape == (10, 10)


def test_relative_logit_deviation_needs_a_shift_and_keeps_a_nan():
    with pytest.raises(ValueError, match=r"shifts must name at least one shift to measure, got \(\)"):
        relative_logit_deviation(posenc.build("rope", d_head=16), d_head=16, shifts=())

    class NaNPast100(PositionalEncoding):
        kind = "rotary"

        def rotate(self, q, k, q_positions=None, k_positions=None):
            broken = (q_positions >= 100)[:, None]  # [s, 1]
            return q.masked_fill(broken, float("nan")), k

    # the NaN of the last shift vanished in Python's max()
    assert math.isnan(relative_logit_deviation(NaNPast100(), d_head=16, shifts=(1, 7, 100)))
