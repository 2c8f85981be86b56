"""The bias encodings (ALiBi, T5, Swin) as modules: their hooks and the inputs they refuse."""

from __future__ import annotations

import re

import pytest
import torch

import posenc


@pytest.mark.parametrize(
    ("build", "positions", "message"),
    [
        (
            lambda: posenc.build("t5", n_heads=2),
            (torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(1, 2, 3, dtype=torch.long)),
            "q_positions must be [n] or [b, n], got shape (1, 2, 3)",
        ),
        (
            lambda: posenc.build("t5", n_heads=2),
            (torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long)),
            "q_positions and k_positions must have the same batch size, got 2 and 3",
        ),
        (
            lambda: posenc.build("swin", n_heads=2, window=3),
            (torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long)),
            "q_positions and k_positions must have the same batch size, got 2 and 3",
        ),
        (
            lambda: posenc.build("alibi", n_heads=2),
            (torch.zeros(2, 1, 3, dtype=torch.long), torch.arange(3)),
            "q_positions must be [n] or [b, n], got shape (2, 1, 3)",
        ),
    ],
)
def test_positions_a_bias_cannot_use_are_refused_naming_them(build, positions, message):
    # a 3-d position tensor used to broadcast into a bias of the wrong rank without a word
    with pytest.raises(ValueError, match=re.escape(message)):
        build().bias(*positions)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_distance": -4}, "max_distance must be positive, got -4"),
        ({"max_distance": 0}, "max_distance must be positive, got 0"),
        ({"num_buckets": -2}, "num_buckets must be positive, got -2"),
    ],
)
def test_t5_refuses_bucket_settings_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("t5", n_heads=2, **kwargs)
