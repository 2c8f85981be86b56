"""The angle-error figure draws exactly the errors angle_error measured, exact zeros at the floor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.analysis import angle_error
from posenc.analysis.precision import RECIPES
from posenc.functional import rope_inv_freq
from posenc.plots import angle_errors
from posenc.plots.precision import HALF_FLOAT32_ULP
from tests.plots.artists import by_gid, labelled


def test_one_line_per_recipe_holding_its_errors():
    positions = torch.tensor([1, 10, 1000, 2**20])
    inv_freq, _ = rope_inv_freq(32)
    errors = {recipe: angle_error(recipe, positions, inv_freq) for recipe in RECIPES}
    figure = angle_errors(positions, errors)
    assert labelled(figure)
    axes = figure.axes[0]
    assert (axes.get_xscale(), axes.get_yscale()) == ("log", "log")
    artists = by_gid(figure)
    for recipe, values in errors.items():
        assert (values > 0).all()
        x, y = artists[f"recipe-{recipe}"].get_data()
        np.testing.assert_array_equal(x, positions.numpy())
        np.testing.assert_array_equal(y, values.numpy())
    assert set(artists["half-ulp"].get_ydata()) == {HALF_FLOAT32_ULP}
    assert "floor" not in artists  # no exact zero, no floor line


def test_exact_zeros_are_drawn_at_the_floor():
    errors = {"exact": torch.tensor([0.0, 1e-9, 0.0], dtype=torch.float64)}
    artists = by_gid(angle_errors([1, 2, 4], errors, floor=1e-17))
    np.testing.assert_array_equal(artists["recipe-exact"].get_ydata(), [1e-17, 1e-9, 1e-17])
    assert set(artists["floor"].get_ydata()) == {1e-17}


def test_angle_errors_refuse_non_positive_positions_and_mismatched_lengths():
    with pytest.raises(ValueError, match="positions must be positive on a log axis, got 0"):
        angle_errors([0, 1], {"a": torch.ones(2)})
    with pytest.raises(ValueError, match=r"errors\['a'\] must hold 2 values, got 3"):
        angle_errors([1, 2], {"a": torch.ones(3)})
    with pytest.raises(ValueError, match="errors must not be empty"):
        angle_errors([1, 2], {})
