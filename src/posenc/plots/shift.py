"""How much attention logits move when every position shifts by Δ, per encoding (seed 004 §7, measured)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from posenc.plots._common import check_nonempty, floored

#: float64 unit roundoff, 2^-53: relative changes near it are rounding, not position.
FLOAT64_ROUNDING = 2.0**-53


def logit_shift(
    changes: Mapping[str, Mapping[int, float]], *, floor: float = 1e-20, title: str | None = None
) -> Figure:
    """One row per (encoding, Δ): the relative logit change on a log axis, exact zeros drawn at ``floor``.

    Args:
        changes: ``{encoding: {Δ: change}}``, e.g. ``{name: logit_shift_change(specimen(name))}``.
        floor: where exact zeros are drawn (a log axis has no 0), marked by the dotted line
            ``gid="floor"`` and a hollow ring ``gid="zero-{encoding}"`` around each zero.
        title: the axes title.

    Returns:
        The Figure; line ``gid="change-{encoding}"`` holds x = max(change, floor) for the shifts in
        the order given, y = their row numbers (row labels name the encoding and Δ, top down); the
        dashed line ``gid="float64-rounding"`` marks 2^-53.

    Raises:
        ValueError: an empty mapping, or an encoding with no shifts.
    """
    check_nonempty("changes", changes)
    rows = [(name, shift) for name, by_shift in changes.items() for shift in by_shift]
    for name, by_shift in changes.items():
        check_nonempty(f"changes[{name!r}]", by_shift)
    figure = Figure(figsize=(9, 1.8 + 0.32 * len(rows)), layout="constrained")
    axes = figure.add_subplot()
    row = 0
    for name, by_shift in changes.items():
        values = np.array([float(value) for value in by_shift.values()], dtype=np.float64)
        y = np.arange(row, row + values.size, dtype=np.float64)
        x = floored(values, floor)
        for left, height in zip(x, y, strict=True):
            axes.plot([floor, left], [height, height], color="lightgrey", linewidth=2, zorder=1)
        (line,) = axes.plot(x, y, "o", markersize=7, label=name, zorder=3)
        line.set_gid(f"change-{name}")
        zeros = values == 0
        if zeros.any():
            (ring,) = axes.plot(
                x[zeros],
                y[zeros],
                "o",
                markersize=12,
                markerfacecolor="none",
                color=line.get_color(),
                zorder=3,
            )
            ring.set_gid(f"zero-{name}")
        row += values.size
    axes.set_yticks(range(len(rows)), [f"{name}   Δ = {shift}" for name, shift in rows])
    axes.set_ylim(len(rows) - 0.4, -0.8)  # top down, with room above the first row for the labels
    axes.set_xscale("log")
    rounding = axes.axvline(FLOAT64_ROUNDING, linestyle="--", color="grey", linewidth=1)
    rounding.set_gid("float64-rounding")
    floor_line = axes.axvline(floor, linestyle=":", color="black", linewidth=1)
    floor_line.set_gid("floor")
    largest = max(float(value) for by_shift in changes.values() for value in by_shift.values())
    axes.set_xlim(floor / 10, max(10.0, 10 * largest))
    axes.text(
        FLOAT64_ROUNDING,
        1.0,
        " float64 rounding 2⁻⁵³",
        transform=axes.get_xaxis_transform(),
        va="bottom",
        fontsize="small",
        color="grey",
    )
    axes.text(floor, 1.0, " exact 0", transform=axes.get_xaxis_transform(), va="bottom", fontsize="small")
    axes.set_xlabel("max |logits(p + Δ) − logits(p)| / max |logits(p)|")
    axes.set_ylabel("encoding, shift Δ")
    axes.set_title(
        "Attention-logit change when every position shifts by Δ" if title is None else title, pad=16
    )
    axes.grid(True, axis="x", which="major", alpha=0.3)
    return figure
