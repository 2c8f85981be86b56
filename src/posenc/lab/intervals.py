"""Means over seeds with their 95% Student-t intervals, as numbers, as table cells, and along a curve.

Every lab table shows a mean over seeds and its interval; a per-position curve (bits per byte at each
position) is averaged in bins equally wide on a log scale of the position before its interval is taken.
"""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np

#: Gauss-Legendre nodes and weights on [-1, 1] for the t distribution's integral.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(64)


def _t_cdf(x: float, df: int) -> float:
    """P(T ≤ x) for x ≥ 0 and Student's t with ``df`` degrees of freedom. With x = √df·tan u the
    density's integral from 0 becomes Γ((df+1)/2) / (√π Γ(df/2)) · ∫₀^U cos^(df−1) u du, U = atan(x/√df):
    a smooth integrand on a bounded range, which Gauss-Legendre integrates to float64 precision."""
    upper = math.atan(x / math.sqrt(df))
    u = upper / 2 * (_NODES + 1)  # the nodes mapped onto [0, U]
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    return 0.5 + norm * upper / 2 * float(np.dot(_WEIGHTS, np.cos(u) ** (df - 1)))


def _t_density(x: float, df: int) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


@functools.cache  # every table cell and curve bin asks for the same few
def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile (at least ½) of Student's t with ``df`` degrees of freedom, by Newton's
    method on its distribution function (starting at the normal quantile, which lies below it)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if not 0.5 <= probability < 1:
        raise ValueError(f"probability must lie in [0.5, 1), got {probability}")
    x = statistics.NormalDist().inv_cdf(probability)
    for _ in range(100):
        step = (_t_cdf(x, df) - probability) / _t_density(x, df)
        x -= step
        if abs(step) < 1e-13 * max(1.0, x):
            break
    return x


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% Student-t interval (a point for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def format_interval(stats: tuple[float, float, float] | None, digits: int = 3) -> str:
    """``mean [low, high]`` (the mean alone when the interval is a point; "—" for None)."""
    if stats is None:
        return "—"
    mean, low, high = stats
    if low == high:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def log_bins(length: int, bins: int) -> list[tuple[int, int]]:
    """About ``bins`` ranges [start, stop) covering 0 … length − 1, equally wide on a log scale of
    position + 1 (single positions at the start, wide bins at the end, where each is noisier)."""
    edges = sorted(
        {min(length, round((length + 1) ** (k / bins)) - 1) for k in range(bins + 1)} | {0, length}
    )
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def binned_curve(per_seed: list[list[float]], length: int, bins: int) -> tuple[list, list, list, list]:
    """Per-position curves of several seeds as (positions, mean, low, high) over :func:`log_bins`."""
    positions, mean, low, high = [], [], [], []
    for start, stop in log_bins(length, bins):
        stats = interval([statistics.fmean(curve[start:stop]) for curve in per_seed])
        positions.append((start + stop - 1) / 2)
        mean.append(stats[0])
        low.append(stats[1])
        high.append(stats[2])
    return positions, mean, low, high
