"""The code-matrix and Gram heatmaps draw exactly the analysis numbers, in both layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from posenc.analysis import gram_matrix
from posenc.functional import sinusoidal_table
from posenc.plots import encoding_matrix, gram_heatmap
from tests.plots.artists import by_gid, labelled


@pytest.mark.parametrize(
    ("layout", "shape", "xlabel"), [("rows", (20, 8), "dimension i"), ("columns", (8, 20), "position j")]
)
def test_the_matrix_image_holds_the_table_in_its_layout(layout, shape, xlabel):
    table = sinusoidal_table(20, 8, dtype=torch.float64, layout=layout)
    figure = encoding_matrix(table, layout=layout)
    assert isinstance(figure, Figure) and labelled(figure)
    image = by_gid(figure)["matrix"]
    assert image.get_array().shape == shape
    np.testing.assert_array_equal(image.get_array(), table.numpy())
    assert figure.axes[0].get_xlabel() == xlabel
    low, high = image.get_clim()
    assert low == -high == -float(table.abs().max())  # centred at 0
    assert any(axes.get_label() == "<colorbar>" for axes in figure.axes)


def test_the_columns_layout_is_the_transpose_of_the_rows_layout():
    rows = by_gid(encoding_matrix(sinusoidal_table(12, 6), layout="rows"))["matrix"].get_array()
    columns = by_gid(encoding_matrix(sinusoidal_table(12, 6, layout="columns"), layout="columns"))["matrix"]
    np.testing.assert_array_equal(columns.get_array(), rows.T)


def test_the_gram_image_holds_the_gram_matrix():
    gram = gram_matrix(sinusoidal_table(30, 16))
    figure = gram_heatmap(gram)
    assert labelled(figure)
    image = by_gid(figure)["gram"]
    np.testing.assert_array_equal(image.get_array(), gram.numpy())
    low, high = image.get_clim()
    assert low == -high == -float(gram.abs().max())


def test_matrix_plots_refuse_bad_input():
    with pytest.raises(ValueError, match="layout must be one of 'rows', 'columns'; got 'diagonal'"):
        encoding_matrix(torch.zeros(3, 4), layout="diagonal")
    with pytest.raises(ValueError, match=r"matrix must have 2 dimensions, got shape \(3,\)"):
        encoding_matrix(torch.zeros(3))
    with pytest.raises(ValueError, match=r"gram must be square \[T, T\], got shape \(3, 4\)"):
        gram_heatmap(torch.zeros(3, 4))
    with pytest.raises(TypeError, match="matrix must be a tensor or numpy array, got list"):
        encoding_matrix([[0.0]])
