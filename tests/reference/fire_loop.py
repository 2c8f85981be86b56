"""FIRE's bias as a float64 loop, written from the paper (Li et al., 2024, https://arxiv.org/abs/2310.04418).

b_h(i, j) = f_θ(ψ(|i − j|) / (ψ(max(L, i)) + eps)),  ψ(x) = log(c·x + 1),
f_θ(x)_h = Σ_k v_hk·max(0, w_k·x + b_k) + a_h  (one hidden ReLU layer, one output per head).
"""

from __future__ import annotations

import math


def fire_input_loop(q: int, k: int, c: float, threshold: float, eps: float) -> float:
    """ψ(|q − k|) / (ψ(max(L, q)) + eps) for one pair."""
    return math.log(c * abs(q - k) + 1.0) / (math.log(c * max(threshold, q) + 1.0) + eps)


def mlp_loop(x: float, w: list[float], b: list[float], v: list[list[float]], a: list[float]) -> list[float]:
    """The MLP 1 → H → h at one input: a list of h outputs."""
    hidden = [max(0.0, w_k * x + b_k) for w_k, b_k in zip(w, b, strict=True)]
    return [
        sum(v_hk * u for v_hk, u in zip(row, hidden, strict=True)) + a_h
        for row, a_h in zip(v, a, strict=True)
    ]


def fire_bias_loop(
    q_positions: list[int],
    k_positions: list[int],
    *,
    c: float,
    threshold: float,
    eps: float,
    w: list[float],
    b: list[float],
    v: list[list[float]],
    a: list[float],
) -> list[list[list[float]]]:
    """bias[h][i][j] for query positions q_positions[i] and key positions k_positions[j]."""
    rows = [
        [mlp_loop(fire_input_loop(q, k, c, threshold, eps), w, b, v, a) for k in k_positions]
        for q in q_positions
    ]
    return [
        [[rows[i][j][h] for j in range(len(k_positions))] for i in range(len(q_positions))]
        for h in range(len(a))
    ]
