"""The wavelength and inv_freq figures draw exactly the analysis numbers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

from posenc.analysis import scaled_inv_freq, wavelengths
from posenc.plots import inv_freq_scalings, wavelength_spectrum
from tests.plots.artists import by_gid, labelled


def test_the_wavelength_line_holds_the_wavelengths():
    values = wavelengths(64)
    figure = wavelength_spectrum(values)
    assert labelled(figure) and figure.axes[0].get_yscale() == "log"
    artists = by_gid(figure)
    x, y = artists["wavelengths"].get_data()
    np.testing.assert_array_equal(x, np.arange(32))
    np.testing.assert_array_equal(y, values.numpy())
    assert set(artists["two-pi"].get_ydata()) == {2 * math.pi}


def test_one_inv_freq_line_and_one_divisor_line_per_scaling():
    spectra = scaled_inv_freq(32)
    figure = inv_freq_scalings(spectra)
    assert labelled(figure)
    artists = by_gid(figure)
    for name, values in spectra.items():
        x, y = artists[f"inv-freq-{name}"].get_data()
        np.testing.assert_array_equal(x, np.arange(16))
        np.testing.assert_array_equal(y, values.numpy())
        if name != "none":
            _, divisor = artists[f"divisor-{name}"].get_data()
            np.testing.assert_array_equal(divisor, (spectra["none"] / values).numpy())
    assert "divisor-none" not in artists
    assert [axes.get_yscale() for axes in figure.axes] == ["log", "log"]


def test_every_scaling_has_a_colour_of_its_own_and_its_divisor_the_same():
    spectra = scaled_inv_freq(64)  # none and ten scalings: more than matplotlib's 10 default colours
    assert len(spectra) > 10
    artists = by_gid(inv_freq_scalings(spectra))
    colours = {name: to_hex(artists[f"inv-freq-{name}"].get_color()) for name in spectra}
    assert len(set(colours.values())) == len(spectra), colours
    for name in spectra.keys() - {"none"}:
        assert to_hex(artists[f"divisor-{name}"].get_color()) == colours[name]


def test_zero_frequencies_are_said_in_the_figure_without_a_warning():
    # proportional RoPE leaves its slow pairs unrotated (θ_k = 0): not drawable on the log axes, and
    # θ_k(none) / 0 used to print "RuntimeWarning: divide by zero" during `posenc report`
    spectra = scaled_inv_freq(64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        artists = by_gid(inv_freq_scalings(spectra))
    note = artists["zero-frequencies"].get_text()
    assert note.startswith("proportional: θ_k = 0 at k = 16…31 (16 of 32 pairs not rotated)"), note
    assert "divisor is infinite" in note and note.count("\n") == 0
    assert "zero-frequencies" not in by_gid(inv_freq_scalings({k: spectra[k] for k in ("none", "linear")}))


def test_without_the_reference_only_the_spectra_are_drawn():
    spectra = scaled_inv_freq(16, scalings={"linear": {"factor": 2.0}})
    figure = inv_freq_scalings(spectra)
    assert len(figure.axes) == 1 and labelled(figure)
    assert sorted(by_gid(figure)) == ["inv-freq-linear"]


def test_inv_freq_scalings_refuse_empty_and_ragged_input():
    with pytest.raises(ValueError, match="inv_freq must not be empty"):
        inv_freq_scalings({})
    with pytest.raises(ValueError, match=r"same length, got lengths \[3, 4\]"):
        inv_freq_scalings({"a": torch.ones(3), "b": torch.ones(4)})
