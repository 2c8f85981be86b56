"""The lab's picture: bits per byte against position for each encoding, mean over seeds with intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure


def bits_per_position(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]],
    *,
    train_length: int,
    title: str = "Bits per byte against position",
) -> Figure:
    """One line per encoding (x: position + 1, log scale; y: bits per byte), its 95% interval shaded.

    Args:
        curves: ``{encoding: (positions, mean, low, high)}``, equal-length sequences each; positions
            count from 0 (the first byte after BOS).
        train_length: L, drawn as a dashed vertical line at position L (never trained at or beyond).

    Returns:
        The Figure; each encoding's line carries ``gid="encoding-{name}"``.
    """
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    for name, (positions, mean, low, high) in curves.items():
        x = [p + 1 for p in positions]
        (line,) = axes.plot(x, mean, label=name, linewidth=1.5)
        line.set_gid(f"encoding-{name}")
        axes.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.axvline(train_length + 1, color="black", linestyle="--", linewidth=1)
    axes.annotate(" L (training length)", (train_length + 1, 1), xycoords=("data", "axes fraction"), va="top")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("position in the window + 1 (bytes of context + 1)")
    axes.set_ylabel("bits per byte")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if curves:
        axes.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure
