"""Sandwich's bias as a float64 loop, written from the paper (Chi et al., 2023, https://arxiv.org/abs/2212.10356).

p_m·p_n = Σ_{k=1}^{d′/2} cos((m − n) / 10000^(2k/d′));  b_h(m, n) = (p_m·p_n − d′/2) / (8h/H), h = 1 … H.
"""

from __future__ import annotations

import math


def sandwich_value(distance: int, head: int, n_heads: int, d_position: int, base: float = 10000.0) -> float:
    """The bias of head ``head`` (0-based) at one distance."""
    dot = sum(math.cos(distance / base ** (2 * k / d_position)) for k in range(1, d_position // 2 + 1))
    return (dot - d_position / 2) / (8 * (head + 1) / n_heads)


def sandwich_bias_loop(
    q_positions: list[int], k_positions: list[int], n_heads: int, d_position: int, base: float = 10000.0
) -> list[list[list[float]]]:
    """bias[h][i][j] for query positions q_positions[i] and key positions k_positions[j]."""
    return [
        [[sandwich_value(q - k, h, n_heads, d_position, base) for k in k_positions] for q in q_positions]
        for h in range(n_heads)
    ]
