"""Angle error against position on log–log axes: posenc's exact angles next to the float32-angle recipe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc.plots._common import as_array, check_nonempty, floored

#: The largest rounding error of a float32 value in [0.5, 1): half its spacing, 2^-25.
HALF_FLOAT32_ULP = 2.0**-25


def angle_errors(
    positions: torch.Tensor | np.ndarray | Sequence[int],
    errors: Mapping[str, torch.Tensor | np.ndarray],
    *,
    floor: float = 1e-18,
    title: str | None = None,
) -> Figure:
    """max |cos − exact|, |sin − exact| over frequencies at each position, one line per recipe, log–log.

    Args:
        positions: ``[n]`` positive positions (a log axis has no 0).
        errors: ``{recipe: [n]}``, e.g. ``{r: angle_error(r, positions, inv_freq) for r in RECIPES}``.
        floor: where exact zeros are drawn (a log axis has no 0); marked, when some value is
            below it, by the dotted line ``gid="floor"``.
        title: the axes title.

    Returns:
        The Figure; line ``gid="recipe-{name}"`` holds x = positions, y = max(error, floor); the
        dashed line ``gid="half-ulp"`` marks 2^-25, one rounding of a float32 value near 1.

    Raises:
        ValueError: an empty mapping, positions ≤ 0, errors of another length than the positions.
    """
    check_nonempty("errors", errors)
    x = as_array(np.asarray(positions, dtype=np.float64), "positions", dims=1)
    if (x <= 0).any():
        raise ValueError(f"positions must be positive on a log axis, got {x[x <= 0][0]:g}")
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    for name, values in errors.items():
        y = as_array(values, f"errors[{name!r}]", dims=1)
        if y.size != x.size:
            raise ValueError(f"errors[{name!r}] must hold {x.size} values, got {y.size}")
        (line,) = axes.plot(x, floored(y, floor), marker=".", markersize=4, linewidth=1.2, label=name)
        line.set_gid(f"recipe-{name}")
    guide = axes.axhline(
        HALF_FLOAT32_ULP, linestyle="--", color="grey", linewidth=1, label="2⁻²⁵: one float32 rounding near 1"
    )
    guide.set_gid("half-ulp")
    if any((as_array(values, name) < floor).any() for name, values in errors.items()):
        floor_line = axes.axhline(
            floor, linestyle=":", color="black", linewidth=0.8, label=f"{floor:g}: exact 0"
        )
        floor_line.set_gid("floor")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("position")
    axes.set_ylabel("max error of cos, sin over frequencies")
    axes.set_title("cos/sin error against position (float32 output)" if title is None else title)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize="small", loc="upper left")
    return figure
