"""Float64 loop reference of FoPE (Hua et al., 2024, https://arxiv.org/abs/2412.17739), re-derived from the
formula: pair k (channels k, k + d/2) turned by cos_k(t) = Σ_f C[f][k]·cos(ω_f·t), sin_k(t) = Σ_f S[f][k]·sin(ω_f·t)
over the frequencies ω_f = base^(−2f/d) above 2π/L; the pairs below it have frequency zero."""

from __future__ import annotations

import math


def fope_vector(x, t, cos_coef, sin_coef, *, max_len, base=10000.0):
    d = len(x)
    half = d // 2
    kept = [base ** (-2 * f / d) for f in range(half) if base ** (-2 * f / d) > 2 * math.pi / max_len]
    out = list(x)
    for k in range(half):
        if k < len(kept):
            c = sum(cos_coef[f][k] * math.cos(omega * t) for f, omega in enumerate(kept))
            s = sum(sin_coef[f][k] * math.sin(omega * t) for f, omega in enumerate(kept))
        else:
            c, s = 1.0, 0.0
        out[k] = x[k] * c - x[k + half] * s
        out[k + half] = x[k + half] * c + x[k] * s
    return out
