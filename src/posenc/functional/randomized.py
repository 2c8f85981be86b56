"""Randomized positions (Ruoss et al., 2023): each training sequence at a random ordered subset of a longer range.

A model trained on sequences of at most N tokens at positions 0 … N − 1 meets positions it never saw
when tested on longer ones, relative encodings included (their distances grow). Ruoss et al.
("Randomized Positional Encodings Boost Length Generalization of Transformers", ACL 2023,
https://arxiv.org/abs/2305.16843) give each training sequence of n tokens n distinct positions drawn
from 0 … L − 1, L the longest length the model is to handle, kept in order: every position and every
distance up to L is trained, while the sequences stay short. The positions are the ordinary
``[b, s]`` positions of every encoding.
"""

from __future__ import annotations

import torch

from posenc._validation import check_positive_int


def randomized_positions(
    batch: int,
    seq_len: int,
    max_position: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``[batch, seq_len]`` int64: for each row, ``seq_len`` distinct positions drawn uniformly from
    0 … max_position − 1, in increasing order.

    Raises:
        ValueError: non-positive sizes, or a range smaller than the sequence (``max_position < seq_len``).
    """
    batch = check_positive_int("batch", batch)
    seq_len = check_positive_int("seq_len", seq_len)
    max_position = check_positive_int("max_position", max_position)
    if max_position < seq_len:
        raise ValueError(
            f"randomized positions draw {seq_len} distinct positions from 0 … max_position − 1; "
            f"max_position={max_position} is fewer"
        )
    keys = torch.rand(
        batch, max_position, generator=generator, device=generator.device if generator else device
    )
    return (
        keys.topk(seq_len, dim=-1).indices.sort(dim=-1).values.to(device)
    )  # [b, s]: a random ordered subset
