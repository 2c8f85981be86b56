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


def test_a_short_row_draws_from_the_whole_range_and_its_padding_repeats_its_last_position():
    # rows of 3 real tokens padded to 12: each of the 40 positions is among a row's 3 with probability
    # 3/40, as for a sequence of 3 drawn alone (not crowded at the start of a draw for 12)
    rows, length = 20000, 3
    positions = randomized_positions(
        rows, 12, 40, lengths=torch.full((rows,), length), generator=torch.Generator().manual_seed(2)
    )
    real, padding = positions[:, :length], positions[:, length:]
    assert (real.diff(dim=-1) > 0).all()
    assert torch.equal(padding, real[:, -1:].expand_as(padding))
    counts = torch.bincount(real.flatten(), minlength=40)
    p = length / 40
    sigma = (rows * p * (1 - p)) ** 0.5
    assert ((counts.double() - rows * p).abs() < 5 * sigma).all()


def test_full_lengths_draw_what_no_lengths_draw():
    drawn = randomized_positions(5, 7, 30, generator=torch.Generator().manual_seed(3))
    full = randomized_positions(
        5, 7, 30, lengths=torch.full((5,), 7), generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(drawn, full)


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        (torch.tensor([2, 9]), "lengths must lie in 1 … seq_len=8, got 2 … 9"),
        (torch.tensor([0, 3]), "lengths must lie in 1 … seq_len=8, got 0 … 3"),
        (torch.tensor([3]), "lengths must have shape [batch] = (2,), got (1,)"),
    ],
)
def test_bad_lengths_are_refused_naming_the_value(lengths, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        randomized_positions(2, 8, 16, lengths=lengths)
