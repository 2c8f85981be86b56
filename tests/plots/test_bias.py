"""The bias figures draw exactly the analysis numbers: per-head heatmaps, lines per distance, buckets, tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.analysis import bias_by_distance, bias_matrix, swin_offset_table, t5_bucket_map
from posenc.plots import bias_heads, bucket_map, bucket_table, distance_bias, offset_tables
from tests.plots.artists import by_gid, labelled


def test_one_heatmap_per_head_on_one_colour_scale():
    bias = bias_matrix(posenc.build("alibi", n_heads=6), 10)
    figure = bias_heads(bias)
    assert labelled(figure)
    artists = by_gid(figure)
    assert sorted(artists) == sorted(f"bias-head-{h}" for h in range(6))
    for head in range(6):
        image = artists[f"bias-head-{head}"]
        np.testing.assert_array_equal(image.get_array(), bias[head].numpy())
        assert image.get_clim() == (-float(bias.abs().max()), float(bias.abs().max()))
    assert sum(axes.get_label() == "<colorbar>" for axes in figure.axes) == 1


def test_one_line_per_head_against_distance():
    distances = torch.arange(0, 30)
    values = bias_by_distance(posenc.build("alibi", n_heads=4), distances)
    figure = distance_bias(distances, values)
    assert labelled(figure)
    artists = by_gid(figure)
    for head in range(4):
        x, y = artists[f"head-{head}"].get_data()
        np.testing.assert_array_equal(x, distances.numpy())
        np.testing.assert_array_equal(y, values[head].numpy())


def test_bucket_lines_hold_the_bucket_map():
    relative = torch.arange(-150, 151)
    buckets = t5_bucket_map(relative)
    figure = bucket_map(relative, buckets)
    assert labelled(figure)
    artists = by_gid(figure)
    for name, values in buckets.items():
        x, y = artists[f"buckets-{name}"].get_data()
        np.testing.assert_array_equal(x, relative.numpy())
        np.testing.assert_array_equal(y, values.numpy())


def test_the_table_image_holds_the_learned_table():
    table = posenc.build("t5", n_heads=4).table.detach().double()
    figure = bucket_table(table)
    assert labelled(figure)
    np.testing.assert_array_equal(by_gid(figure)["table"].get_array(), table.numpy())


def test_swin_offset_panels_hold_each_head_centred_on_offset_zero():
    tables = swin_offset_table(posenc.build("swin", n_heads=3, window=(3, 5)))  # [3, 5, 9]
    figure = offset_tables(tables)
    assert labelled(figure)
    artists = by_gid(figure)
    for head in range(3):
        image = artists[f"offsets-head-{head}"]
        np.testing.assert_array_equal(image.get_array(), tables[head].numpy())
        assert image.get_extent() == [-4.5, 4.5, 2.5, -2.5]


def test_bias_plots_refuse_mismatched_input():
    with pytest.raises(ValueError, match=r"values must be \[h, 3\]"):
        distance_bias(torch.arange(3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="buckets must not be empty"):
        bucket_map(torch.arange(3), {})
    with pytest.raises(ValueError, match=r"buckets\['causal'\] must hold 3 values, got 2"):
        bucket_map(torch.arange(3), {"causal": torch.zeros(2)})
    with pytest.raises(ValueError, match="bias must have 3 dimensions"):
        bias_heads(torch.zeros(4, 4))
