"""Figures of encodings on a grid of patches: one patch against all, per-head 2-D biases, M-RoPE's positions."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from posenc.plots._common import as_array, heatmap, small_multiples

#: Colours of the token types in the M-RoPE figure: text, image, video.
TYPE_COLOURS = ("0.55", "tab:blue", "tab:orange")
TYPE_NAMES = ("text", "image", "video")
AXIS_NAMES = ("t", "h", "w")


def similarity_map(
    values: torch.Tensor | np.ndarray, *, patch: tuple[int, int], title: str | None = None
) -> Figure:
    """How one patch relates to every patch of an h×w grid, as a heatmap with the patch marked.

    Args:
        values: ``[h, w]``, e.g. ``posenc.analysis.patch_similarity(encoding, grid)``.
        patch: (row, column) of the patch compared with all.

    Returns:
        The Figure; its image has ``gid="patch-similarity"`` and holds ``values``.
    """
    values = as_array(values, "values", dims=2)
    figure = Figure(figsize=(5.2, 4.4), layout="constrained")
    axes = figure.subplots()
    image = heatmap(axes, values, gid="patch-similarity", signed=False)
    axes.set_aspect("equal")
    axes.plot(
        [patch[1]], [patch[0]], marker="s", markersize=9, markerfacecolor="none", markeredgecolor="black"
    )
    axes.set_xlabel("patch column")
    axes.set_ylabel("patch row")
    figure.colorbar(image, ax=axes, label="similarity to the marked patch", shrink=0.9)
    # over the whole figure, wrapped: a long title above the narrow heatmap alone was cut at both ends
    figure.suptitle("Similarity of one patch to every patch" if title is None else title, wrap=True)
    return figure


def grid_bias_heads(
    values: torch.Tensor | np.ndarray, *, title: str | None = None, columns: int = 4
) -> Figure:
    """The bias from the centre patch to every patch, one h×w heatmap per head on one colour scale.

    Args:
        values: ``[heads, h, w]``, e.g. ``posenc.analysis.grid_bias(encoding)``.

    Returns:
        The Figure; the image of head k has ``gid="grid-bias-head-{k}"`` and holds ``values[k]``.
    """
    values = as_array(values, "values", dims=3)
    figure = Figure(
        figsize=(2.4 * min(columns, values.shape[0]) + 1.4, 2.4 * -(-values.shape[0] // columns) + 0.6),
        layout="constrained",
    )
    cells = small_multiples(figure, values.shape[0], columns=columns, sharex=True, sharey=True)
    low, high = float(values.min()), float(values.max())
    image = None
    for head, axes in enumerate(cells):
        image = heatmap(axes, values[head], gid=f"grid-bias-head-{head}", signed=False)
        image.set_clim(low, high if high > low else low + 1.0)  # one scale for every head
        axes.set_aspect("equal")
        axes.set_title(f"head {head}", fontsize="medium")
        axes.set_xlabel("patch column")
        axes.set_ylabel("patch row")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.label_outer()
    figure.colorbar(image, ax=cells, label="bias from the centre patch", shrink=0.85)
    figure.suptitle("Bias from the centre patch, per head" if title is None else title)
    return figure


def axis_positions(
    positions: torch.Tensor | np.ndarray, types: list[int], *, title: str | None = None
) -> Figure:
    """M-RoPE's positions of a mixed sequence: one line per axis (t, h, w) against the token index,
    the tokens coloured by type (text on the diagonal t = h = w; an image's patches spread over h and w).

    Args:
        positions: ``[s, 3]``, e.g. ``posenc.analysis.mrope_example()[0]``.
        types: the type of each token: 0 text, 1 image, 2 video.

    Returns:
        The Figure; the line of axis a has ``gid="axis-{t|h|w}"`` and holds ``positions[:, a]``.
    """
    values = as_array(positions, "positions", dims=2)
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    axes = figure.subplots()
    tokens = np.arange(values.shape[0])
    for a in range(values.shape[1]):
        (line,) = axes.plot(
            tokens, values[:, a], marker="o", markersize=3, linewidth=1, label=f"{AXIS_NAMES[a]} position"
        )
        line.set_gid(f"axis-{AXIS_NAMES[a]}")
    start = 0
    for index in range(1, len(types) + 1):
        if index == len(types) or types[index] != types[start]:
            axes.axvspan(start - 0.5, index - 0.5, color=TYPE_COLOURS[types[start]], alpha=0.12, linewidth=0)
            axes.text(
                (start + index - 1) / 2,
                values.max() + 0.5,
                TYPE_NAMES[types[start]],
                ha="center",
                fontsize="small",
            )
            start = index
    axes.set_xlabel("token index")
    axes.set_ylabel("position on each axis")
    figure.legend(loc="outside right upper")  # beside the axes: inside, it hid a segment's name and span
    axes.set_title("M-RoPE positions of text, an image and a video" if title is None else title)
    return figure
