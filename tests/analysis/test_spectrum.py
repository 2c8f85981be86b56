"""Wavelengths and scaled RoPE frequencies, against float64 loops written from their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.analysis import scaled_inv_freq, scaling_examples, wavelengths
from posenc.functional import SCALINGS, rope_inv_freq, sinusoidal_frequencies


@pytest.mark.parametrize(("d_model", "base"), [(8, 10000.0), (64, 10000.0), (128, 500000.0), (2, 3.0)])
def test_wavelengths_are_two_pi_times_base_to_the_2i_over_d(d_model, base):
    loop = [2 * math.pi * base ** (2 * i / d_model) for i in range(d_model // 2)]
    torch.testing.assert_close(
        wavelengths(d_model, base), torch.tensor(loop, dtype=torch.float64), rtol=1e-15, atol=0
    )


def test_wavelength_is_one_turn_of_each_sinusoidal_frequency():
    turns = wavelengths(64) * sinusoidal_frequencies(64)  # λ_i·ω_i = 2π
    torch.testing.assert_close(turns, torch.full((32,), 2 * math.pi, dtype=torch.float64), rtol=1e-15, atol=0)


def test_wavelengths_refuse_odd_width_and_bad_base():
    with pytest.raises(ValueError, match="d_model must be even, got 7"):
        wavelengths(7)
    with pytest.raises(ValueError, match="base must be positive and finite, got -1.0"):
        wavelengths(8, -1.0)


def test_every_scaling_has_an_example_that_rope_inv_freq_accepts():
    examples = scaling_examples(64)
    assert list(examples) == ["none", *SCALINGS]
    spectra = scaled_inv_freq(64)
    assert list(spectra) == list(examples)
    for name, arguments in examples.items():
        expected, _ = rope_inv_freq(64, scaling=None if name == "none" else name, **arguments)
        torch.testing.assert_close(spectra[name], expected, rtol=0, atol=0)
        assert spectra[name].dtype == torch.float64 and spectra[name].shape == (32,)


def test_scaled_inv_freq_equal_the_loop_formulas():
    r, base = 32, 10000.0
    examples = scaling_examples(r)
    spectra = scaled_inv_freq(r, base)
    factor = examples["linear"]["factor"]
    length = examples["dynamic"]["original_max_position_embeddings"]
    seq_len = examples["dynamic"]["seq_len"]
    ntk_base = base * factor ** (r / (r - 2))
    dynamic_base = base * (factor * seq_len / length - (factor - 1)) ** (r / (r - 2))
    long_factor = examples["longrope"]["long_factor"]
    loops = {
        "none": [base ** (-2 * k / r) for k in range(r // 2)],
        "linear": [base ** (-2 * k / r) / factor for k in range(r // 2)],
        "ntk": [ntk_base ** (-2 * k / r) for k in range(r // 2)],
        "dynamic": [dynamic_base ** (-2 * k / r) for k in range(r // 2)],
        "longrope": [base ** (-2 * k / r) / long_factor[k] for k in range(r // 2)],  # seq_len > original
    }
    for name, loop in loops.items():
        torch.testing.assert_close(spectra[name], torch.tensor(loop, dtype=torch.float64), rtol=1e-14, atol=0)


def test_example_longrope_ramp_runs_from_one_to_the_factor():
    long_factor = scaling_examples(64)["longrope"]["long_factor"]
    assert long_factor[0] == 1.0 and long_factor[-1] == pytest.approx(8.0)
    assert all(a < b for a, b in zip(long_factor, long_factor[1:], strict=False))


def test_scaled_inv_freq_takes_chosen_scalings_and_names_an_unknown_one():
    spectra = scaled_inv_freq(16, scalings={"none": {}, "linear": {"factor": 2.0}})
    torch.testing.assert_close(spectra["linear"] * 2, spectra["none"], rtol=0, atol=0)
    with pytest.raises(ValueError, match="unknown scaling 'ntk-by-parts'"):
        scaled_inv_freq(16, scalings={"ntk-by-parts": {"factor": 2.0}})
