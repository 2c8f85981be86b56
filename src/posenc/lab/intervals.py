"""Means over seeds with their 95% Student-t intervals, as numbers, as table cells, and along a curve.

Every lab table shows a mean over seeds and its interval; a per-position curve (bits per byte at each
position) is averaged in bins equally wide on a log scale of the position before its interval is taken.
"""

from __future__ import annotations

import math
import statistics

#: Two-sided 95% Student t quantiles by degrees of freedom (1.96 beyond the table).
T_95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% Student-t interval (a point for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    df = len(values) - 1
    quantile = next((T_95[k] for k in sorted(T_95) if k >= df), 1.96)
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
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
