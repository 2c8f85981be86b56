"""Float64 loop reference of STRING (Schenck et al., 2025, https://arxiv.org/abs/2502.02562): Cayley-STRING's
RoPE after P = (I − S)(I + S)⁻¹, and Circulant-STRING's exp(Σ_a x_a (C_a − C_aᵀ))."""

from __future__ import annotations

from tests.reference.matrix_loop import (
    add,
    expm,
    identity,
    inverse,
    matmul,
    matvec,
    rotate_pairs,
    scaled,
    skew_from_upper,
    transpose,
)


def cayley_map(upper: list[float], d: int) -> list[list[float]]:
    s = skew_from_upper(upper, d)
    eye = identity(d)
    return matmul(add(eye, s, -1.0), inverse(add(eye, s)))


def cayley_string_vector(x, coords, upper, frequency_vectors):
    """Pᵀ·RoPE_W(coords)·P·x, pair k turning by Σ_a coords[a]·W[k][a], channels k and k + d/2 paired."""
    p = cayley_map(upper, len(x))
    angles = [sum(c * w for c, w in zip(coords, row, strict=True)) for row in frequency_vectors]
    return matvec(transpose(p), rotate_pairs(matvec(p, x), angles, "half"))


def circulant_string_vector(x, coords, rows):
    d = len(x)
    generator = [[0.0] * d for _ in range(d)]
    for c, row in zip(coords, rows, strict=True):
        circ = [[row[(j - i) % d] for j in range(d)] for i in range(d)]
        generator = add(generator, add(circ, transpose(circ), -1.0), c)
    return matvec(expm(generator), x)


__all__ = ["cayley_map", "cayley_string_vector", "circulant_string_vector", "scaled"]
