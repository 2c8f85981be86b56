"""The flat-line picture of seed 002: PE[i]·PE[i+d] against the start i, one line per distance."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from matplotlib.figure import Figure


def flat_lines(
    dots: Mapping[int, torch.Tensor],
    expected: Mapping[int, float] | None = None,
    *,
    title: str = "Dot product of position codes per distance",
) -> Figure:
    """One solid line per distance (x: start i, y: PE[i]·PE[i+d]); the closed form dashed.

    Args:
        dots: ``dot_by_distance`` output, ``{d: [T − d]}``.
        expected: optional ``{d: value}``, drawn as a dashed horizontal line in the same colour.

    Returns:
        The Figure; its measured lines carry ``gid="distance-{d}"``, the dashed ones
        ``gid="expected-{d}"``, so the drawn data can be read back.
    """
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    for distance, values in dots.items():
        values = values.detach().to(torch.float64).cpu().numpy()
        (line,) = axes.plot(
            range(len(values)), values, marker="o", markersize=3, label=f"distance {distance}"
        )
        line.set_gid(f"distance-{distance}")
        if expected is not None:
            dashed = axes.axhline(
                float(expected[distance]), linestyle="--", linewidth=1, color=line.get_color()
            )
            dashed.set_gid(f"expected-{distance}")
    axes.set_xlabel("start index i   (pair = (i, i + d))")
    axes.set_ylabel("PE[i] · PE[i + d]")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if dots:
        axes.legend(
            title="solid: measured\ndashed: Σ_k cos(d·ω_k)" if expected is not None else None,
            fontsize="small",
            loc="center left",
            bbox_to_anchor=(1.01, 0.5),
        )
    return figure
