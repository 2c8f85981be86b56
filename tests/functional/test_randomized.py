"""Randomized positions (Ruoss et al., 2023): sorted, distinct, within the range, every position as likely."""

from __future__ import annotations

import re

import pytest
import torch

from posenc.functional import randomized_positions


def test_each_row_is_a_sorted_set_of_distinct_positions_within_the_range():
    positions = randomized_positions(64, 12, 40, generator=torch.Generator().manual_seed(0))
    assert positions.shape == (64, 12) and positions.dtype == torch.int64
    assert (positions.diff(dim=-1) > 0).all()  # increasing, hence distinct
    assert int(positions.min()) >= 0 and int(positions.max()) < 40


def test_every_position_of_the_range_is_drawn_as_often():
    # each of the 40 positions is in a row with probability 12/40: counts over 20,000 rows within 5 σ
    rows = 20000
    counts = torch.bincount(
        randomized_positions(rows, 12, 40, generator=torch.Generator().manual_seed(1)).flatten(), minlength=40
    )
    p = 12 / 40
    sigma = (rows * p * (1 - p)) ** 0.5
    assert ((counts.double() - rows * p).abs() < 5 * sigma).all()


def test_a_range_as_long_as_the_sequence_gives_every_position():
    assert torch.equal(randomized_positions(3, 7, 7), torch.arange(7).expand(3, 7))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            (2, 8, 5),
            "randomized positions draw 8 distinct positions from 0 … max_position − 1; max_position=5 is fewer",
        ),
        ((0, 8, 16), "batch must be positive, got 0"),
        ((2, 8, -1), "max_position must be positive, got -1"),
    ],
)
def test_bad_sizes_are_refused_naming_the_value(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        randomized_positions(*arguments)
