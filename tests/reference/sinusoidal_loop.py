"""Float64 loop implementations written straight from the seed formulas, slow on purpose."""

from __future__ import annotations

import math

import mpmath


def sinusoidal_rows(positions, d_model: int, base: float = 10000.0) -> list[list[float]]:
    """Seed 002/003: PE[pos, 2k] = sin(pos / base^(2k/d)), PE[pos, 2k+1] = cos(pos / base^(2k/d))."""
    table = []
    for pos in positions:
        row = [0.0] * d_model
        for i in range(0, d_model, 2):
            div_term = base ** (i / d_model)
            row[i] = math.sin(pos / div_term)
            row[i + 1] = math.cos(pos / div_term)
        table.append(row)
    return table


def sinusoidal_columns(n: int, d: int, base: float = 10000.0) -> list[list[float]]:
    """Seed 000: the d×n matrix P, PE(i, j) = sin(j / base^(i/d)) for even i, cos(j / base^((i−1)/d)) for odd i."""
    return [
        [
            math.sin(j / base ** (i / d)) if i % 2 == 0 else math.cos(j / base ** ((i - 1) / d))
            for j in range(n)
        ]
        for i in range(d)
    ]


def sinusoidal_exact(positions, d_model: int, base: float = 10000.0, digits: int = 40) -> list[list]:
    """The same table in mpmath at `digits` significant digits: the exact value for precision tests."""
    with mpmath.workdps(digits):
        omegas = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * k) / d_model) for k in range(d_model // 2)]
        table = []
        for pos in positions:
            row = []
            for omega in omegas:
                angle = pos * omega
                row += [mpmath.sin(angle), mpmath.cos(angle)]
            table.append(row)
    return table


def dot(u, v) -> float:
    return math.fsum(a * b for a, b in zip(u, v, strict=True))
