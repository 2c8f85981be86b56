"""Reading drawn data back from a Figure: every data artist carries a gid."""

from __future__ import annotations

from matplotlib.artist import Artist
from matplotlib.figure import Figure

#: The widest figure the report shows at its own size (posenc.report.DPI): its page column at a
#: 1700 px window, less the margins.
REPORT_COLUMN_PX = 1330


def by_gid(figure: Figure) -> dict[str, Artist]:
    """gid -> artist over the whole figure; a gid used twice is an error."""
    artists: dict[str, Artist] = {}
    for artist in figure.findobj(lambda a: a.get_gid() is not None):
        gid = artist.get_gid()
        assert gid not in artists, f"gid {gid!r} is used by two artists"
        artists[gid] = artist
    return artists


def labelled(figure: Figure) -> bool:
    """Every axes that holds data (not a colourbar) has an x label in the bottom row and a y label in the
    first column (small multiples label only their outer axes)."""
    data_axes = [axes for axes in figure.axes if axes.get_label() != "<colorbar>"]
    for axes in data_axes:
        spec = axes.get_subplotspec()
        if spec.is_last_row() and not axes.get_xlabel():
            return False
        if spec.is_first_col() and not axes.get_ylabel():
            return False
    return bool(data_axes)


def titles(figure: Figure) -> list[str]:
    """The figure's suptitle (if any) and every axes title."""
    found = [figure.get_suptitle()] if figure.get_suptitle() else []
    return found + [axes.get_title() for axes in figure.axes if axes.get_title()]


def _drawn(figure: Figure):
    """The figure laid out once, as drawing it would (a second layout may move what the first placed),
    without rasterizing it; the renderer that measures the extents of what it placed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(figure.canvas, FigureCanvasAgg):
        FigureCanvasAgg(figure)
        figure.draw_without_rendering()
    return figure.canvas.get_renderer()


def cut_texts(figure: Figure) -> list[str]:
    """The texts (titles, labels, notes, legend entries; tick labels aside, which matplotlib leaves out
    past the limits) that reach past the figure's edge, where the saved image cuts them."""
    from matplotlib.axis import Tick
    from matplotlib.text import Text

    renderer = _drawn(figure)
    ticks = {id(label) for tick in figure.findobj(Tick) for label in (tick.label1, tick.label2)}
    edge = figure.bbox
    cut = []
    for text in figure.findobj(Text):
        if id(text) in ticks or not text.get_visible() or not text.get_text():
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < edge.x0 - 1 or box.x1 > edge.x1 + 1 or box.y0 < edge.y0 - 1 or box.y1 > edge.y1 + 1:
            cut.append(text.get_text())
    return cut


def covered(figure: Figure) -> list[str]:
    """What a legend hides of an axes (a line, a text, a shaded span) or a note written inside an axes
    runs across (a line): ``["legend over line 'x'", …]``, empty when nothing is hidden."""
    import numpy as np

    renderer = _drawn(figure)
    legends = [legend for legend in figure.legends if legend.get_visible()]
    found = []
    for axes in figure.axes:
        boxes = [("legend", legend.get_window_extent(renderer)) for legend in legends]
        if axes.get_legend() is not None:
            boxes.append(("legend", axes.get_legend().get_window_extent(renderer)))
        boxes += [
            (f"note {t.get_text()[:30]!r}", t.get_window_extent(renderer)) for t in axes.texts if t.get_gid()
        ]
        for what, box in boxes:
            for line in axes.get_lines():
                points = line.get_transform().transform(line.get_xydata())
                if len(points) > 1:  # the segments between the points too
                    points = np.concatenate(
                        [np.linspace(a, b, 25) for a, b in zip(points[:-1], points[1:], strict=True)]
                    )
                x, y = points[:, 0], points[:, 1]
                if np.any((x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)):
                    found.append(f"{what} over line {line.get_label()!r}")
            if what != "legend":
                continue
            for text in axes.texts:
                if text.get_text() and text.get_window_extent(renderer).overlaps(box):
                    found.append(f"legend over text {text.get_text()!r}")
            for patch in axes.patches:
                if patch.get_window_extent(renderer).overlaps(box):
                    found.append(f"legend over {type(patch).__name__} {patch.get_gid() or ''}".rstrip())
    return found
