"""The position-code matrix as a heatmap in both layouts (seed 003's T×d, seed 000's d×n), and its Gram matrix."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc._validation import check_choice
from posenc.plots._common import as_array, heatmap

LAYOUTS = ("rows", "columns")


def encoding_matrix(
    matrix: torch.Tensor | np.ndarray, *, layout: str = "rows", title: str | None = None
) -> Figure:
    """The codes of every position as an image, one row (``"rows"``) or one column (``"columns"``) each.

    Args:
        matrix: ``[T, d]`` for ``layout="rows"`` (seed 003: row pos, column dimension i), ``[d, n]``
            for ``layout="columns"`` (seed 000's P: row dimension i, column position j), e.g.
            ``sinusoidal_table(T, d, layout=layout)`` or ``code_table(...)`` (transposed for columns).
        layout: which axis of ``matrix`` holds positions.
        title: the axes title (a default names the layout and shape).

    Returns:
        The Figure; its image has ``gid="matrix"`` and holds ``matrix`` as given, with a colourbar
        centred at 0.

    Raises:
        ValueError: an unknown ``layout``, a matrix that is not 2-D.
    """
    layout = check_choice("layout", layout, LAYOUTS)
    values = as_array(matrix, "matrix", dims=2)
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    image = heatmap(axes, values, gid="matrix", signed=True)
    rows, columns = values.shape
    if layout == "rows":
        axes.set_xlabel("dimension i")
        axes.set_ylabel("position pos")
        default = f"Position codes PE ∈ ℝ^(T×d), one row per position (T={rows}, d={columns})"
    else:
        axes.set_xlabel("position j")
        axes.set_ylabel("dimension i")
        default = f"Position codes P ∈ ℝ^(d×n), one column per position (d={rows}, n={columns})"
    axes.set_title(default if title is None else title)
    figure.colorbar(image, ax=axes, label="PE value")
    return figure


def gram_heatmap(gram: torch.Tensor | np.ndarray, *, title: str | None = None) -> Figure:
    """The Gram matrix G[i, j] = PE_i · PE_j as an image: stripes parallel to the diagonal when Toeplitz.

    Args:
        gram: ``[T, T]``, e.g. ``gram_matrix(table)``.
        title: the axes title.

    Returns:
        The Figure; its image has ``gid="gram"`` and holds ``gram`` as given, with a colourbar
        centred at 0.

    Raises:
        ValueError: a matrix that is not square.
    """
    values = as_array(gram, "gram", dims=2)
    if values.shape[0] != values.shape[1]:
        raise ValueError(f"gram must be square [T, T], got shape {tuple(values.shape)}")
    figure = Figure(figsize=(7.5, 6), layout="constrained")
    axes = figure.add_subplot()
    image = heatmap(axes, values, gid="gram", signed=True)
    axes.set_aspect("equal")
    axes.set_xlabel("position j")
    axes.set_ylabel("position i")
    axes.set_title("Gram matrix  PE_i · PE_j" if title is None else title)
    figure.colorbar(image, ax=axes, label="PE_i · PE_j")
    return figure
