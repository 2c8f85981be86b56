"""Kerple's kernels as float64 loops, written from the paper (Chi et al., 2022, https://arxiv.org/abs/2205.09921).

log:   b_h(m, n) = −r1_h·log(1 + r2_h·|m − n|)
power: b_h(m, n) = −r1_h·|m − n|^r2_h
"""

from __future__ import annotations

import math


def kerple_value(distance: int, r1: float, r2: float, variant: str) -> float:
    """The bias of one head at one distance."""
    if variant == "log":
        return -r1 * math.log(1.0 + r2 * abs(distance))
    return -r1 * math.pow(abs(distance), r2)


def kerple_bias_loop(
    q_positions: list[int], k_positions: list[int], r1: list[float], r2: list[float], variant: str
) -> list[list[list[float]]]:
    """bias[h][i][j] for query positions q_positions[i] and key positions k_positions[j]."""
    return [
        [[kerple_value(q - k, r1_h, r2_h, variant) for k in k_positions] for q in q_positions]
        for r1_h, r2_h in zip(r1, r2, strict=True)
    ]
