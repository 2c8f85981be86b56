"""Float64 loop reference of LieRE (Ostmeier et al., 2024, https://arxiv.org/abs/2406.10322) and ComRoPE-LD
(Yu et al., 2025, https://arxiv.org/abs/2506.03737): each block of a vector turned by exp(Σ_a x_a·A_a)."""

from __future__ import annotations

from tests.reference.matrix_loop import add, expm, matvec, skew_from_upper


def block_exponential_vector(x, coords, generators):
    """x with block c turned by exp(Σ_a coords[a]·generators[a][c]) (generators: [n][blocks] B×B lists)."""
    blocks = len(generators[0])
    size = len(x) // blocks
    out = []
    for c in range(blocks):
        g = [[0.0] * size for _ in range(size)]
        for a, coordinate in enumerate(coords):
            g = add(g, generators[a][c], coordinate)
        out += matvec(expm(g), x[c * size : (c + 1) * size])
    return out


def liere_vector(x, coords, entries, block):
    """LieRE: generators from their free entries ``entries[a][c]`` (upper triangles, row by row)."""
    generators = [[skew_from_upper(upper, block) for upper in axis] for axis in entries]
    return block_exponential_vector(x, coords, generators)


def comrope_vector(x, coords, base_entries, scales, block):
    """ComRoPE-LD: axis a's generator of block c is scales[a][c]·B_c, B_c skew from ``base_entries[c]``."""
    bases = [skew_from_upper(upper, block) for upper in base_entries]
    generators = [[[[s * v for v in row] for row in bases[c]] for c, s in enumerate(axis)] for axis in scales]
    return block_exponential_vector(x, coords, generators)
