"""Attention biases per head: ALiBi's lines, T5's bucket map and table, Swin's 2-D offset tables (seed 004 §5, §6)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure

from posenc.plots._common import as_array, check_nonempty, heatmap, small_multiples, symmetric_limit

#: Heads are ordered (ALiBi: steepest slope first), so their lines take colours along a sequential map.
HEAD_CMAP = "plasma"


def bias_heads(bias: torch.Tensor | np.ndarray, *, title: str | None = None, columns: int = 4) -> Figure:
    """The bias ``[h, i, j]`` as one heatmap per head, on one colour scale centred at 0.

    Args:
        bias: ``[h, i, j]``, e.g. ``encoding.bias(positions, positions)``.
        title: the figure title.
        columns: panels per row.

    Returns:
        The Figure; the image of head h has ``gid="bias-head-{h}"`` and holds ``bias[h]``; one
        colourbar serves every head.
    """
    values = as_array(bias, "bias", dims=3)
    figure = Figure(
        figsize=(2.6 * min(columns, values.shape[0]) + 1.4, 2.6 * -(-values.shape[0] // columns) + 0.6),
        layout="constrained",
    )
    cells = small_multiples(figure, values.shape[0], columns=columns, sharex=True, sharey=True)
    limit = symmetric_limit(values)
    image = None
    for head, axes in enumerate(cells):
        image = heatmap(axes, values[head], gid=f"bias-head-{head}", signed=True, limit=limit)
        axes.set_aspect("equal")
        axes.set_title(f"head {head}", fontsize="medium")
        axes.set_xlabel("key j")
        axes.set_ylabel("query i")
        axes.label_outer()
    figure.colorbar(image, ax=cells, label="bias added to q_i·k_j", shrink=0.85)
    figure.suptitle("Attention bias per head" if title is None else title)
    return figure


def distance_bias(
    distances: torch.Tensor | np.ndarray, values: torch.Tensor | np.ndarray, *, title: str | None = None
) -> Figure:
    """The bias against the query − key distance, one line per head.

    Args:
        distances: ``[n]`` query − key distances i − j (positive: the key is before the query).
        values: ``[h, n]``, e.g. ``bias_by_distance(encoding, distances)``.
        title: the axes title.

    Returns:
        The Figure; line ``gid="head-{h}"`` holds x = distances, y = ``values[h]``.

    Raises:
        ValueError: values whose last axis does not match the distances.
    """
    x = as_array(distances, "distances", dims=1)
    y = as_array(values, "values", dims=2)
    if y.shape[1] != x.size:
        raise ValueError(f"values must be [h, {x.size}] to match the distances, got shape {tuple(y.shape)}")
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    colours = _head_colours(y.shape[0])
    for head in range(y.shape[0]):
        (line,) = axes.plot(x, y[head], linewidth=1.4, color=colours[head], label=f"head {head}")
        line.set_gid(f"head-{head}")
    axes.axhline(0, color="black", linewidth=0.6)
    axes.set_xlabel("distance i − j   (query − key; positive: key before the query)")
    axes.set_ylabel("bias b_h(i − j)")
    axes.set_title("Bias per head against distance" if title is None else title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure


def bucket_map(
    relative_positions: torch.Tensor | np.ndarray,
    buckets: Mapping[str, torch.Tensor | np.ndarray],
    *,
    title: str | None = None,
) -> Figure:
    """T5's bucket index against key − query position, one step line per variant (bidirectional, causal).

    Args:
        relative_positions: ``[n]`` key − query positions j − i.
        buckets: ``{name: [n]}``, e.g. ``t5_bucket_map(relative_positions, ...)``.
        title: the axes title.

    Returns:
        The Figure; line ``gid="buckets-{name}"`` holds x = relative positions, y = buckets.

    Raises:
        ValueError: an empty mapping, buckets whose length does not match the positions.
    """
    check_nonempty("buckets", buckets)
    x = as_array(relative_positions, "relative_positions", dims=1)
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    for name, values in buckets.items():
        y = as_array(values, f"buckets[{name!r}]", dims=1)
        if y.size != x.size:
            raise ValueError(f"buckets[{name!r}] must hold {x.size} values, got {y.size}")
        (line,) = axes.plot(x, y, drawstyle="steps-mid", linewidth=1.6, label=name)
        line.set_gid(f"buckets-{name}")
    axes.axvline(0, color="black", linewidth=0.6)
    axes.set_xlabel("relative position j − i   (key − query; negative: key before the query)")
    axes.set_ylabel("bucket")
    axes.set_title("T5 relative-position buckets" if title is None else title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def bucket_table(table: torch.Tensor | np.ndarray, *, title: str | None = None) -> Figure:
    """A learned bias table ``[buckets, h]`` as a heatmap: one row per bucket, one column per head.

    Returns:
        The Figure; its image has ``gid="table"`` and holds ``table`` as given, colourbar centred at 0.
    """
    values = as_array(table, "table", dims=2)
    figure = Figure(figsize=(6, 6), layout="constrained")
    axes = figure.add_subplot()
    image = heatmap(axes, values, gid="table", signed=True)
    axes.set_xlabel("head h")
    axes.set_ylabel("bucket")
    axes.set_xticks(range(values.shape[1]))
    axes.set_title("Learned bias table per head" if title is None else title)
    figure.colorbar(image, ax=axes, label="bias")
    return figure


def offset_tables(tables: torch.Tensor | np.ndarray, *, title: str | None = None, columns: int = 4) -> Figure:
    """Swin's table per head on the grid of 2-D offsets (dy, dx) between query and key tokens.

    Args:
        tables: ``[h, 2Wh−1, 2Ww−1]``, e.g. ``swin_offset_table(encoding)``; entry
            ``[h, dy + Wh − 1, dx + Ww − 1]`` for dy = y_query − y_key, dx = x_query − x_key.
        title: the figure title.
        columns: panels per row.

    Returns:
        The Figure; the image of head h has ``gid="offsets-head-{h}"`` and holds ``tables[h]``,
        drawn with its centre at offset (0, 0); one colourbar serves every head.
    """
    values = as_array(tables, "tables", dims=3)
    heads, rows, cols = values.shape
    reach_y, reach_x = (rows - 1) / 2, (cols - 1) / 2
    figure = Figure(
        figsize=(2.6 * min(columns, heads) + 1.4, 2.6 * -(-heads // columns) + 0.6), layout="constrained"
    )
    cells = small_multiples(figure, heads, columns=columns, sharex=True, sharey=True)
    limit = symmetric_limit(values)
    image = None
    for head, axes in enumerate(cells):
        image = heatmap(axes, values[head], gid=f"offsets-head-{head}", signed=True, limit=limit)
        image.set_extent((-reach_x - 0.5, reach_x + 0.5, reach_y + 0.5, -reach_y - 0.5))
        axes.set_aspect("equal")
        axes.set_title(f"head {head}", fontsize="medium")
        axes.set_xlabel("dx (columns)")
        axes.set_ylabel("dy (rows)")
        axes.label_outer()
    figure.colorbar(image, ax=cells, label="bias", shrink=0.85)
    figure.suptitle("Relative-position bias table per head, by 2-D offset" if title is None else title)
    return figure


def _head_colours(count: int) -> list:
    cmap = colormaps[HEAD_CMAP]
    return [cmap(0.85 * index / max(count - 1, 1)) for index in range(count)]  # no pale yellow
