"""Per-head heatmaps of what an encoding that reads the content does to one input: its terms, its weights."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc.plots._common import as_array, heatmap, small_multiples, symmetric_limit


def causal_heads(
    values: torch.Tensor | np.ndarray,
    *,
    label: str,
    signed: bool,
    title: str | None = None,
    columns: int = 4,
) -> Figure:
    """``values`` ``[h, i, j]`` (NaN for keys after the query, left blank) as one heatmap per head.

    Args:
        label: the colourbar's label.
        signed: a diverging map centred at 0 (terms), else a sequential one from 0 (weights).

    Returns:
        The Figure; the image of head h has ``gid="content-head-{h}"`` and holds ``values[h]``.
    """
    values = as_array(values, "values", dims=3)
    finite = values[np.isfinite(values)]
    figure = Figure(  # a row of square heatmaps, with room below for the key labels and above for the title
        figsize=(2.6 * min(columns, values.shape[0]) + 1.4, 2.9 * -(-values.shape[0] // columns) + 1.2),
        layout="constrained",
    )
    cells = small_multiples(figure, values.shape[0], columns=columns, sharex=True, sharey=True)
    limit = symmetric_limit(finite)
    image = None
    for head, axes in enumerate(cells):
        image = heatmap(axes, values[head], gid=f"content-head-{head}", signed=signed, limit=limit)
        if not signed:
            image.set_clim(0.0, float(finite.max()) if finite.size else 1.0)
        axes.set_aspect("equal")
        axes.set_title(f"head {head}", fontsize="medium")
        axes.set_xlabel("key j")
        axes.set_ylabel("query i")
        axes.label_outer()
    figure.colorbar(image, ax=cells, label=label, shrink=0.85)
    if title is not None:
        figure.suptitle(title)
    return figure


__all__ = ["causal_heads"]
