"""Float64 loop reference of Golden Gate RoPE (Xiong, 2025, https://jerryxio.ng/posts/nd-rope), written
from the construction: directions from the generalised golden ratio, log-spaced frequencies."""

from __future__ import annotations

import math
from statistics import NormalDist

from tests.reference.matrix_loop import rotate_pairs


def generalised_golden_ratio(n: int) -> float:
    """The positive root of x^(n+1) = x + 1, by bisection on [1, 2]."""
    low, high = 1.0, 2.0
    for _ in range(200):
        mid = (low + high) / 2
        if mid ** (n + 1) - mid - 1 > 0:
            high = mid
        else:
            low = mid
    return (low + high) / 2


def direction(j: int, n: int) -> list[float]:
    """The j-th (from 1) point of the R_n sequence, frac(j·φ_n^(−a)), through the normal quantile, normalised."""
    phi = generalised_golden_ratio(n)
    z = [math.fmod(j * phi ** -(a + 1), 1.0) for a in range(n)]
    g = [NormalDist().inv_cdf(v) for v in z]
    norm = math.sqrt(sum(v * v for v in g))
    return [v / norm for v in g]


def golden_gate_vector(x, coords, head, *, min_freq, max_freq, layout="half"):
    """x (one head's d channels) at coordinates ``coords`` turned as Golden Gate RoPE turns head ``head``."""
    pairs, n = len(x) // 2, len(coords)
    angles = []
    for k in range(pairs):
        t = (pairs - 1 - k) / (pairs - 1) if pairs > 1 else 1.0  # fastest first
        omega = math.exp(math.log(min_freq) + t * (math.log(max_freq) - math.log(min_freq)))
        u = direction(head * pairs + k + 1, n)
        angles.append(omega * sum(c * v for c, v in zip(coords, u, strict=True)))
    return rotate_pairs(x, angles, layout)
