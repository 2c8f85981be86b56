"""Float64 loop linear algebra for the references of learned rotations: lists of Python floats only."""

from __future__ import annotations

import math


def identity(n: int) -> list[list[float]]:
    return [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def matvec(a: list[list[float]], x: list[float]) -> list[float]:
    return [sum(a[i][t] * x[t] for t in range(len(x))) for i in range(len(a))]


def add(a, b, scale: float = 1.0):
    return [[a[i][j] + scale * b[i][j] for j in range(len(a[0]))] for i in range(len(a))]


def scaled(a, factor: float):
    return [[factor * v for v in row] for row in a]


def transpose(a):
    return [list(row) for row in zip(*a, strict=True)]


def skew_from_upper(upper: list[float], n: int) -> list[list[float]]:
    """A − Aᵀ with A's strict upper triangle ``upper`` read row by row."""
    s = [[0.0] * n for _ in range(n)]
    it = iter(upper)
    for i in range(n):
        for j in range(i + 1, n):
            v = next(it)
            s[i][j], s[j][i] = v, -v
    return s


def inverse(a: list[list[float]]) -> list[list[float]]:
    """Gauss–Jordan elimination with partial pivoting."""
    n = len(a)
    m = [list(row) + identity(n)[i] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        pivot = m[c][c]
        m[c] = [v / pivot for v in m[c]]
        for r in range(n):
            if r != c and m[r][c] != 0.0:
                f = m[r][c]
                m[r] = [vr - f * vc for vr, vc in zip(m[r], m[c], strict=True)]
    return [row[n:] for row in m]


def expm(a: list[list[float]]) -> list[list[float]]:
    """exp(A) by scaling and squaring of its Taylor series (30 terms after scaling to norm < 1/2)."""
    n = len(a)
    norm = max(sum(abs(v) for v in row) for row in a)
    squarings = max(0, math.ceil(math.log2(norm)) + 1) if norm > 0.5 else 0
    small = scaled(a, 2.0**-squarings)
    result, term = identity(n), identity(n)
    for k in range(1, 30):
        term = scaled(matmul(term, small), 1.0 / k)
        result = add(result, term)
    for _ in range(squarings):
        result = matmul(result, result)
    return result


def rotate_pairs(x: list[float], angles: list[float], layout: str = "half") -> list[float]:
    """Pair k of x turned by angles[k]: (k, k + r/2) for "half", (2k, 2k + 1) for "interleaved"."""
    r = 2 * len(angles)
    out = list(x)
    for k, angle in enumerate(angles):
        c, s = math.cos(angle), math.sin(angle)
        a, b = (2 * k, 2 * k + 1) if layout == "interleaved" else (k, k + r // 2)
        out[a] = x[a] * c - x[b] * s
        out[b] = x[b] * c + x[a] * s
    return out
