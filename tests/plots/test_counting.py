"""The counted-positions figure: drawn from the analysis numbers, for the encodings that give the view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from posenc.analysis import specimen
from posenc.analysis.counting import sentence_counts
from posenc.cli import main
from posenc.plots import gallery
from posenc.plots.counting import counted_positions
from tests.plots.artists import by_gid, labelled, titles


def test_the_gallery_figure_draws_the_counted_positions_of_the_sample_sentence():
    (spec,) = [spec for spec in gallery.figures("cope") if spec.name == "cope-counted-positions"]
    figure = spec.build()
    counts = sentence_counts(specimen("cope"))
    artists = by_gid(figure)
    np.testing.assert_array_equal(artists["counted"].get_ydata(), counts.counted.numpy())
    np.testing.assert_array_equal(artists["token-count"].get_ydata(), counts.token_count.numpy())
    assert spec.title in titles(figure) and labelled(figure)
    assert "fixed random projection" in spec.caption
    assert [spec.name for spec in gallery.figures("cope")] == ["cope-counted-positions", "cope-logit-shift"]


def test_the_figure_kind_needs_the_counted_positions_view():
    assert gallery.KINDS["counted-positions"].needs(specimen("cope")) is None
    assert gallery.KINDS["counted-positions"].needs(specimen("alibi")) == "counted_positions"


def test_posenc_plot_writes_the_figures(tmp_path):
    assert main(["plot", "cope", "--out", str(tmp_path)]) == 0
    assert sorted(path.name for path in tmp_path.glob("*.png")) == [
        "cope-counted-positions.png",
        "cope-logit-shift.png",
    ]


def test_counted_positions_refuses_arrays_that_do_not_match_the_words():
    assert isinstance(counted_positions(["a", "b"], torch.ones(2), torch.ones(2)), Figure)
    with pytest.raises(ValueError, match=r"one value per word \(2\), got 3 and 2"):
        counted_positions(["a", "b"], torch.ones(3), torch.ones(2))
