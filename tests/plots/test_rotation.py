"""The rotating-vector figure draws exactly the trajectory the analysis measured."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.analysis import rotation_trajectory
from posenc.plots import rotating_vector
from posenc.plots.rotation import default_pairs
from tests.plots.artists import by_gid, labelled


def trajectory(n: int = 20) -> tuple[torch.Tensor, posenc.PositionalEncoding]:
    encoding = posenc.build("rope", d_head=32)
    vector = torch.randn(32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return rotation_trajectory(encoding, vector, n), encoding


def test_each_panel_holds_its_pair_in_position_order():
    points, encoding = trajectory()
    figure = rotating_vector(points, inv_freq=encoding.inv_freq)
    assert labelled(figure)
    artists = by_gid(figure)
    pairs = default_pairs(16)
    assert pairs == [0, 2, 4, 15]
    for pair in pairs:
        np.testing.assert_array_equal(artists[f"pair-{pair}"].get_xydata(), points[:, pair, :].numpy())
        np.testing.assert_array_equal(
            artists[f"pair-{pair}-positions"].get_offsets(), points[:, pair, :].numpy()
        )
        np.testing.assert_array_equal(artists[f"pair-{pair}-positions"].get_array(), np.arange(20))
        radius = np.hypot(*artists[f"circle-{pair}"].get_xydata().T)
        np.testing.assert_allclose(radius, np.hypot(*points[0, pair].numpy()), rtol=1e-12)
    assert any("θ = 1 rad/position" in axes.get_title() for axes in figure.axes)


def test_chosen_pairs_and_positions():
    points, _ = trajectory(5)
    figure = rotating_vector(points, positions=[10, 11, 12, 13, 14], pairs=[3])
    artists = by_gid(figure)
    assert sorted(artists) == ["circle-3", "pair-3", "pair-3-positions"]
    np.testing.assert_array_equal(artists["pair-3-positions"].get_array(), [10, 11, 12, 13, 14])


def test_rotating_vector_refuses_bad_input():
    points, _ = trajectory(5)
    with pytest.raises(ValueError, match=r"trajectory must be \[n, r/2, 2\]"):
        rotating_vector(torch.zeros(5, 4, 3))
    with pytest.raises(ValueError, match="pairs must be in 0 … 15, got 16"):
        rotating_vector(points, pairs=[16])
    with pytest.raises(ValueError, match=r"positions must be \[5\]"):
        rotating_vector(points, positions=[0, 1])
    with pytest.raises(ValueError, match=r"inv_freq must be \[16\]"):
        rotating_vector(points, inv_freq=torch.ones(3))
