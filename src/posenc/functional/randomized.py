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
    lengths: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``[batch, seq_len]`` int64: for each row, ``seq_len`` distinct positions drawn uniformly from
    0 … max_position − 1, in increasing order.

    ``lengths`` ``[batch]``: the tokens of each row before its padding. Row i then draws ``lengths[i]``
    positions from the whole range, as Ruoss et al. draw them for a sequence of that length (not the first
    ``lengths[i]`` of a draw for the padded width, which would crowd a short sequence at the start), and
    its padding repeats its last position. None: every row is ``seq_len`` tokens long.

    Raises:
        ValueError: non-positive sizes, a range smaller than the sequence (``max_position < seq_len``), or
            lengths of the wrong shape or outside 1 … seq_len.
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
    drawn = keys.topk(seq_len, dim=-1).indices  # [b, s]: distinct positions, in a uniformly random order
    if lengths is not None:
        drawn = _first_of_each_row(drawn, _check_lengths(lengths, batch, seq_len).to(drawn.device))
    return drawn.sort(dim=-1).values.to(device)  # [b, s]: a random ordered subset


def _check_lengths(lengths: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape [batch] = ({batch},), got {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > seq_len):
        raise ValueError(
            f"lengths must lie in 1 … seq_len={seq_len}, got {int(lengths.min())} … {int(lengths.max())}"
        )
    return lengths


def _first_of_each_row(drawn: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The first ``lengths[i]`` of row i's positions (a uniform sample of that many, since the row is in
    random order), the rest of the row replaced by the largest of them, so that it sorts after them."""
    kept = torch.arange(drawn.shape[-1], device=drawn.device) < lengths[:, None]  # [b, s]
    largest = drawn.masked_fill(~kept, -1).amax(dim=-1, keepdim=True)  # [b, 1]
    return torch.where(kept, drawn, largest)  # [b, s]
