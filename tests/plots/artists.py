"""Reading drawn data back from a Figure: every data artist carries a gid."""

from __future__ import annotations

from matplotlib.artist import Artist
from matplotlib.figure import Figure


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
