"""Helpers shared by the figures: tensors to arrays, heatmaps centred at zero, grids of small multiples."""

from __future__ import annotations

import math
from collections.abc import Iterable

import matplotlib as mpl
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

#: Diverging map for signed values (centred at 0), sequential map otherwise.
SIGNED_CMAP = "RdBu_r"
SEQUENTIAL_CMAP = "viridis"
#: Line styles, one per pass through the colours: solid for the first ten lines, as matplotlib draws them.
LINE_STYLES = ("-", "--", ":", "-.")


def as_array(values: torch.Tensor | np.ndarray, name: str, dims: int | None = None) -> np.ndarray:
    """``values`` as a float64 numpy array, checking its number of dimensions."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to(torch.float64).cpu().numpy()
    elif isinstance(values, np.ndarray):
        values = values.astype(np.float64)
    else:
        raise TypeError(f"{name} must be a tensor or numpy array, got {type(values).__name__}")
    if dims is not None and values.ndim != dims:
        raise ValueError(f"{name} must have {dims} dimensions, got shape {tuple(values.shape)}")
    return values


def symmetric_limit(values: np.ndarray) -> float:
    """max |value|, so that a diverging map is centred at 0 (1 for an all-zero array)."""
    largest = float(np.abs(values).max()) if values.size else 0.0
    return largest if largest > 0 else 1.0


def heatmap(
    axes: Axes, values: np.ndarray, *, gid: str, signed: bool, limit: float | None = None
) -> AxesImage:
    """``values`` drawn as an image, row 0 at the top; diverging and centred at 0 when ``signed``."""
    if signed:
        limit = symmetric_limit(values) if limit is None else limit
        image = axes.imshow(
            values, cmap=SIGNED_CMAP, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
        )
    else:
        image = axes.imshow(values, cmap=SEQUENTIAL_CMAP, aspect="auto", interpolation="nearest")
    image.set_gid(gid)
    return image


def small_multiples(figure: Figure, count: int, *, columns: int = 4, **kwargs) -> list[Axes]:
    """A grid of ``count`` axes, ``columns`` wide; unused cells are removed."""
    columns = min(columns, count)
    rows = math.ceil(count / columns)
    grid = figure.subplots(rows, columns, squeeze=False, **kwargs)
    cells = list(grid.flat)
    for unused in cells[count:]:
        unused.remove()
    return cells[:count]


def floored(values: np.ndarray, floor: float) -> np.ndarray:
    """``values`` with exact zeros (and anything below ``floor``) raised to ``floor``, for a log axis."""
    return np.maximum(values, floor)


def check_nonempty(name: str, mapping) -> None:
    if not mapping:
        raise ValueError(f"{name} must not be empty, got {mapping!r}")


def line_styles(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """A colour and line style per name, in the order given: ``{name: {"color": …, "linestyle": …}}``
    to pass to ``plot``; no two of the first 60 names look alike.

    matplotlib's default cycle has 10 colours, so the 11th line looks like the 1st and a legend of 13
    encodings names two lines with one colour. The first ten names get those ten colours, solid; the
    next ten the lighter shades of tab20, dashed (a light shade beside its own dark one is told apart
    by the dashes); then the twenty colours again, dotted, then dash-dotted. A figure that styles
    every panel from one call keeps each name's colour the same in all of them.
    """
    dark = [mpl.colors.to_hex(colour) for colour in mpl.colormaps["tab10"].colors]
    light = [mpl.colors.to_hex(colour) for colour in mpl.colormaps["tab20"].colors[1::2]]
    colours = dark + light
    styles = {}
    for index, name in enumerate(dict.fromkeys(names)):
        rounds = index // len(colours)  # passes through all twenty colours before this name
        style = LINE_STYLES[index // len(dark)] if rounds == 0 else LINE_STYLES[2 + (rounds - 1) % 2]
        styles[name] = {"color": colours[index % len(colours)], "linestyle": style}
    return styles
