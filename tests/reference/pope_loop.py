"""Float64 loop reference of PoPE's score (Gopalakrishnan et al., 2025, https://arxiv.org/abs/2509.10534):
Re Σ_c softplus(q_c)·e^{i(i·θ_c − δ_c)}·conj(softplus(k_c)·e^{i·j·θ_c}), θ_c = base^(−c/d)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

TWO_PI = Decimal("6.283185307179586476925286766559005768394338798750211641949889184615632812572417997")


def softplus(x: float) -> float:
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0)


def _cos_of(distance: int, theta: float, delta: float) -> float:
    """cos(distance·θ − δ) with the product taken exactly (60 digits) and reduced modulo 2π before the cosine."""
    with localcontext() as context:
        context.prec = 60
        angle = Decimal(distance) * Decimal(theta) - Decimal(delta)
        angle -= TWO_PI * (angle / TWO_PI).to_integral_value()
        return math.cos(float(angle))


def pope_score(q, k, i, j, phase, base=10000.0):
    d = len(q)
    total = 0.0
    for c in range(d):
        theta = base ** (-c / d)
        delta = min(max(phase[c], -2 * math.pi), 0.0)
        total += softplus(q[c]) * softplus(k[c]) * _cos_of(i - j, theta, delta)
    return total
