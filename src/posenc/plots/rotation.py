"""One vector rotating across positions: each RoPE pair as a point turning on its circle (seed 004 §4.2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc.plots._common import SEQUENTIAL_CMAP, as_array, small_multiples


def default_pairs(count: int) -> list[int]:
    """Four pairs from fastest to slowest: 0, count/8, count/4 and count − 1 (fewer when count is small)."""
    return sorted({0, count // 8, count // 4, count - 1})


def rotating_vector(
    trajectory: torch.Tensor | np.ndarray,
    *,
    positions: torch.Tensor | np.ndarray | Sequence[int] | None = None,
    pairs: Sequence[int] | None = None,
    inv_freq: torch.Tensor | np.ndarray | None = None,
    title: str | None = None,
) -> Figure:
    """Pair k of one vector at every position, one panel per pair (two a row), points coloured by position.

    Args:
        trajectory: ``[n, r/2, 2]``, e.g. ``rotation_trajectory(encoding, vector, positions)``.
        positions: the positions ``[n]`` the rows were taken at (default 0 … n−1), for the colours.
        pairs: which pairs k to draw (default: fastest, two in between, slowest).
        inv_freq: θ_k ``[r/2]``, named in each panel's title when given.
        title: the figure title.

    Returns:
        The Figure; in the panel of pair k the line ``gid="pair-{k}"`` holds the points
        ``trajectory[:, k, :]`` in position order, the scatter ``gid="pair-{k}-positions"`` the same
        points coloured by position, the dashed circle ``gid="circle-{k}"`` the radius at the first one.

    Raises:
        ValueError: a trajectory that is not ``[n, r/2, 2]``, positions of another length, a pair
            index out of range.
    """
    points = as_array(trajectory, "trajectory", dims=3)
    if points.shape[-1] != 2:
        raise ValueError(f"trajectory must be [n, r/2, 2], got shape {tuple(points.shape)}")
    count = points.shape[1]
    positions = np.arange(points.shape[0]) if positions is None else np.asarray(positions)
    if positions.shape != (points.shape[0],):
        raise ValueError(
            f"positions must be [{points.shape[0]}] to match the trajectory, got {positions.shape}"
        )
    pairs = default_pairs(count) if pairs is None else list(pairs)
    theta = None if inv_freq is None else as_array(inv_freq, "inv_freq", dims=1)
    if theta is not None and theta.size != count:
        raise ValueError(f"inv_freq must be [{count}] to match the trajectory, got {theta.size} values")
    for pair in pairs:
        if not 0 <= pair < count:
            raise ValueError(f"pairs must be in 0 … {count - 1}, got {pair}")
    # two panels a row: four in one row made a figure of 1540 px whose labels no page showed legibly
    columns = min(len(pairs), 2)
    figure = Figure(figsize=(3.2 * columns + 1.2, 3.6 * -(-len(pairs) // columns)), layout="constrained")
    cells = small_multiples(figure, len(pairs), columns=columns)
    scatter = None
    for axes, pair in zip(cells, pairs, strict=True):
        xy = points[:, pair, :]  # [n, 2]
        radius = float(np.hypot(*xy[0]))
        angle = np.linspace(0, 2 * np.pi, 200)
        (circle,) = axes.plot(
            radius * np.cos(angle), radius * np.sin(angle), "--", color="grey", linewidth=0.8
        )
        circle.set_gid(f"circle-{pair}")
        (line,) = axes.plot(xy[:, 0], xy[:, 1], color="grey", linewidth=0.6, alpha=0.6)
        line.set_gid(f"pair-{pair}")
        scatter = axes.scatter(
            xy[:, 0],
            xy[:, 1],
            c=positions,
            cmap=SEQUENTIAL_CMAP,
            vmin=positions.min(),
            vmax=positions.max(),
            s=18,
            zorder=3,
        )
        scatter.set_gid(f"pair-{pair}-positions")
        axes.annotate("", xy=tuple(xy[0]), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": "black"})
        limit = 1.15 * max(radius, float(np.abs(xy).max()), 1e-12)
        axes.set_xlim(-limit, limit)
        axes.set_ylim(-limit, limit)
        axes.set_aspect("equal")
        axes.set_title(
            f"pair {pair}" if theta is None else f"pair {pair}: θ = {theta[pair]:.3g} rad/position"
        )
        axes.set_xlabel("first channel x_a")
        axes.set_ylabel("second channel x_b")
    figure.colorbar(scatter, ax=cells, label="position m", shrink=0.8)
    figure.suptitle("One vector rotated at positions m: pair k turns by m·θ_k" if title is None else title)
    return figure
