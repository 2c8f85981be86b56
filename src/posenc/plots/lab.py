"""The lab's pictures: bits per byte against position for each encoding, accuracy against length per
task, and accuracy at each answer position per task, means over seeds with their intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from posenc.plots._common import line_styles


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
        The Figure; each encoding's line carries ``gid="encoding-{name}"``, and a colour and line
        style of its own (:func:`~posenc.plots._common.line_styles`: more than 10 encodings are drawn).
    """
    figure = Figure(figsize=(9, 5), layout="constrained")
    axes = figure.add_subplot()
    styles = line_styles(curves)
    for name, (positions, mean, low, high) in curves.items():
        x = [p + 1 for p in positions]
        (line,) = axes.plot(x, mean, label=name, linewidth=1.5, **styles[name])
        line.set_gid(f"encoding-{name}")
        axes.fill_between(x, low, high, color=styles[name]["color"], alpha=0.2, linewidth=0)
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


#: ``{task: (n, {encoding: (xs, mean, low, high)})}``: one panel per task, one line per encoding.
Panels = Mapping[
    str, tuple[int, Mapping[str, tuple[Sequence[int], Sequence[float], Sequence[float], Sequence[float]]]]
]


def accuracy_against_length(
    panels: Panels,
    *,
    ylabel: str = "exact match",
    xlabel: str = "length",
    title: str = "Exact match against length",
) -> Figure:
    """One panel per task: one line per encoding (x: evaluated length; y: accuracy in 0 … 1) with its 95%
    interval shaded, and the training length L dashed.

    Args:
        panels: ``{task: (L, {encoding: (lengths, mean, low, high)})}``.

    Returns:
        The Figure; each line carries ``gid="{task}-{encoding}"``. An encoding has one colour and line
        style in every panel, whichever encodings each task ran, and the one legend lists every
        encoding of any panel, in the order first met.
    """
    figure, panel_axes = _accuracy_panels(panels, ylabel=ylabel, xlabel=xlabel, title=title)
    for axes, (task, (length_l, lines)) in zip(panel_axes, panels.items(), strict=True):
        axes.set_xticks(sorted({n for lengths, *_ in lines.values() for n in lengths}))
        axes.axvline(length_l, color="black", linestyle="--", linewidth=1)
        axes.set_title(f"{task} (L = {length_l})", fontsize="medium")
    return figure


def accuracy_per_answer_position(
    panels: Panels, *, title: str = "Accuracy at each answer position"
) -> Figure:
    """One panel per task: one line per encoding (x: answer token 1, 2, …, EOS last; y: the fraction of
    examples of length n whose token there is right) with its 95% interval shaded: which tokens a
    model misses when it misses whole examples.

    Args:
        panels: ``{task: (n, {encoding: (answer positions from 1, mean, low, high)})}``.

    Returns:
        The Figure, drawn as :func:`accuracy_against_length` draws its lines and legend.
    """
    figure, panel_axes = _accuracy_panels(
        panels, ylabel="accuracy", xlabel="answer token (EOS last)", title=title
    )
    for axes, (task, (n, _)) in zip(panel_axes, panels.items(), strict=True):
        axes.set_title(f"{task} at n = {n}", fontsize="medium")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure


def _accuracy_panels(panels: Panels, *, ylabel: str, xlabel: str, title: str) -> tuple[Figure, list]:
    """The figure of :func:`accuracy_against_length` without its ticks, L markers and panel titles, and
    the axes of its panels in the order of ``panels``."""
    # two panels a row: three made a figure of 1562 px, shown at two thirds of its size or less
    columns = max(1, min(2, len(panels)))
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(max(9.0, 4.2 * columns + 1.6), 3.4 * rows + 0.4), layout="constrained")
    grid = figure.subplots(rows, columns, squeeze=False, sharey=True)
    styles = line_styles(name for _, lines in panels.values() for name in lines)
    for axes, (task, (_, lines)) in zip(grid.flat, panels.items(), strict=False):
        for name, (xs, mean, low, high) in lines.items():
            (line,) = axes.plot(xs, mean, marker="o", markersize=3, label=name, linewidth=1.5, **styles[name])
            line.set_gid(f"{task}-{name}")
            axes.fill_between(xs, low, high, color=styles[name]["color"], alpha=0.15, linewidth=0)
        axes.set_xlabel(xlabel)
        axes.set_ylim(-0.03, 1.03)
        axes.grid(True, alpha=0.3)
    for axes in grid[:, 0]:
        axes.set_ylabel(ylabel)
    for axes in list(grid.flat)[len(panels) :]:
        axes.remove()  # an empty cell of the last row
    if styles:  # one entry per encoding, drawn as its lines are (not taken from a panel that may lack some)
        handles = [
            Line2D([], [], marker="o", markersize=3, linewidth=1.5, **style) for style in styles.values()
        ]
        figure.legend(handles, list(styles), fontsize="small", loc="outside right center")
    figure.suptitle(title, fontsize="medium", wrap=True)
    return figure, list(grid.flat)[: len(panels)]
