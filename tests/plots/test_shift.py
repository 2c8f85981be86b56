"""The logit-shift figure draws exactly the changes logit_shift_change measured, zeros at the floor."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.analysis import logit_shift_change, specimen
from posenc.plots import logit_shift
from posenc.plots.shift import FLOAT64_ROUNDING
from tests.plots.artists import by_gid, labelled


def test_one_marker_per_encoding_and_shift_holding_the_change():
    changes = {name: logit_shift_change(specimen(name)) for name in ("sinusoidal", "rope", "alibi")}
    figure = logit_shift(changes, floor=1e-20)
    assert labelled(figure) and figure.axes[0].get_xscale() == "log"
    artists = by_gid(figure)
    row = 0
    for name, by_shift in changes.items():
        values = np.array(list(by_shift.values()))
        x, y = artists[f"change-{name}"].get_data()
        np.testing.assert_array_equal(x, np.maximum(values, 1e-20))
        np.testing.assert_array_equal(y, np.arange(row, row + values.size))
        row += values.size
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels == [f"{name}   Δ = {shift}" for name, by_shift in changes.items() for shift in by_shift]
    assert set(artists["float64-rounding"].get_xdata()) == {FLOAT64_ROUNDING}


def test_exact_zeros_sit_on_the_floor_inside_a_ring():
    changes = {"alibi": logit_shift_change(specimen("alibi"))}
    assert set(changes["alibi"].values()) == {0.0}  # the bias is exactly the same under a shift
    artists = by_gid(logit_shift(changes, floor=1e-19))
    np.testing.assert_array_equal(artists["change-alibi"].get_xdata(), [1e-19] * 3)
    np.testing.assert_array_equal(artists["zero-alibi"].get_xdata(), [1e-19] * 3)
    assert set(artists["floor"].get_xdata()) == {1e-19}


def test_no_ring_where_nothing_is_zero():
    artists = by_gid(logit_shift({"made-up": {1: 0.5, 2: 1e-3}}))
    assert "zero-made-up" not in artists
    np.testing.assert_array_equal(artists["change-made-up"].get_xdata(), [0.5, 1e-3])


def test_logit_shift_refuses_empty_input():
    with pytest.raises(ValueError, match="changes must not be empty"):
        logit_shift({})
    with pytest.raises(ValueError, match=r"changes\['rope'\] must not be empty"):
        logit_shift({"rope": {}})
