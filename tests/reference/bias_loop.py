"""Float64 loop implementations of ALiBi, T5's buckets and Swin's index, written from the papers' formulas."""

from __future__ import annotations

import math


def alibi_slopes_paper(n_heads: int) -> list[float]:
    """Press et al. 2022: 2^(−8k/n) for the largest power of two n ≤ H, then 2^(−8k/2n) for odd k."""
    n = 1
    while 2 * n <= n_heads:
        n *= 2
    slopes = [math.pow(2.0, -8.0 * k / n) for k in range(1, n + 1)]
    k = 1
    while len(slopes) < n_heads:
        slopes.append(math.pow(2.0, -8.0 * k / (2 * n)))
        k += 2
    return slopes


def alibi_slopes_mpt(n_heads: int, bias_max: float) -> list[float]:
    """MPT: 1/2^(k·B/n₂) for the smallest power of two n₂ ≥ H; odd k (1-based even index) first when n₂ ≠ H."""
    n2 = 1
    while n2 < n_heads:
        n2 *= 2
    slopes = [1.0 / math.pow(2.0, k * bias_max / n2) for k in range(1, n2 + 1)]
    if n2 != n_heads:
        slopes = [slopes[i] for i in range(1, n2, 2)] + [slopes[i] for i in range(0, n2, 2)]
    return slopes[:n_heads]


def alibi_bias_loop(q_positions, k_positions, slopes, *, symmetric: bool = False) -> list:
    """bias[h][i][j] = −m_h·(q_i − k_j), or −m_h·|q_i − k_j| when symmetric."""
    return [
        [[-m * abs(q - k) if symmetric else -m * (q - k) for k in k_positions] for q in q_positions]
        for m in slopes
    ]


def t5_bucket(
    relative_position: int, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> int:
    """T5's bucket of one relative position (key − query), float64 math.log."""
    bucket = 0
    n = num_buckets
    if bidirectional:
        n //= 2
        if relative_position > 0:
            bucket += n
        distance = abs(relative_position)
    else:
        distance = max(-relative_position, 0)
    exact = n // 2
    if distance < exact:
        return bucket + distance
    large = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (n - exact))
    return bucket + min(large, n - 1)


def t5_log_value(
    relative_position: int, bidirectional: bool, num_buckets: int, max_distance: int
) -> float | None:
    """The float64 value that t5_bucket truncates, ln(d/e)/ln(D/e)·(n − e), or None for an exact bucket."""
    n = num_buckets // 2 if bidirectional else num_buckets
    distance = abs(relative_position) if bidirectional else max(-relative_position, 0)
    exact = n // 2
    if distance < exact:
        return None
    return math.log(distance / exact) / math.log(max_distance / exact) * (n - exact)


def swin_index_loop(height: int, width: int) -> list[list[int]]:
    """index[p][q] = (y₁ − y₂ + Wh − 1)·(2Ww − 1) + (x₁ − x₂ + Ww − 1), tokens in row-major order."""
    tokens = [(y, x) for y in range(height) for x in range(width)]
    return [
        [(y1 - y2 + height - 1) * (2 * width - 1) + (x1 - x2 + width - 1) for (y2, x2) in tokens]
        for (y1, x1) in tokens
    ]
