"""Float64 loop RoPE written from seed 004 §4.4 (interleaved) and its half-split variant."""

from __future__ import annotations

import math


def rope_vector(
    x: list[float],
    position: int,
    base: float = 10000.0,
    *,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
) -> list[float]:
    """Rotate one vector: pair k by position·θ_k, θ_k = base^(−2k/r); channels past r unchanged."""
    r = len(x) if rotary_dim is None else rotary_dim
    out = list(x)
    for k in range(r // 2):
        theta = base ** (-2 * k / r)
        c, s = math.cos(position * theta), math.sin(position * theta)
        a, b = (2 * k, 2 * k + 1) if layout == "interleaved" else (k, k + r // 2)
        out[a] = x[a] * c - x[b] * s
        out[b] = x[b] * c + x[a] * s
    return out
