"""An example posenc plugin: a learned logarithmic decay of the attention scores with distance.

bias(i, j) = −softplus(a_h)·log(1 + |i − j|), one learned a_h per head (KERPLE's logarithmic kernel
with r2 = 1, written the short way). Installed, its entry point (pyproject.toml) makes the name
``distance_decay`` valid in ``posenc.build`` and every ``posenc`` command; nothing in posenc changes.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.functional import softplus

import posenc


class DistanceDecay(posenc.PositionalEncoding):
    """−softplus(a_h)·log(1 + |i − j|) added to the scores of head h."""

    kind = "bias"  # what it is: attention asks it for a bias, and a cache keeps positions as they are
    parameter_formula = "h"
    label = "Distance decay (plugin)"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        if not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
        self.n_heads = n_heads
        self.strength = nn.Parameter(torch.zeros(n_heads))  # [h]; softplus(0) = log 2

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return n_heads

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).abs()  # [(b,) i, j]
        decay = torch.log1p(distance.to(self.strength.dtype))  # [(b,) i, j]
        slopes = softplus(self.strength)  # [h]
        if decay.dim() == 2:
            return -slopes[:, None, None] * decay  # [h, i, j]
        return -slopes[None, :, None, None] * decay[:, None]  # [b, h, i, j]
