"""Sandwich (Chi et al., 2023): the bias against the paper's formula in float64, exact angles at long
distances, memory per distance, every attention backend, KV-cache decoding, and the inputs it refuses."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
import posenc.encodings.sandwich as sandwich_module
from posenc.analysis import properties, specimen
from posenc.backends import ATTENTION
from posenc.encodings.sandwich import Sandwich
from posenc.functional.sinusoidal import sinusoidal_frequency_pieces
from tests.encodings.bias_checks import (
    assert_backends_agree,
    assert_cache_decoding_equals_the_full_forward,
    built,
    score_mod_bias,
)
from tests.reference.sandwich_loop import sandwich_bias_loop, sandwich_value

NEAR = torch.arange(-40, 41)
FAR = torch.tensor([1000, 4097, 65535, 2**20 + 1, 2**21 - 1])


def _worst_error(encoding: Sandwich, distances: torch.Tensor) -> float:
    """max |distance_bias − the paper's loop| over ``distances``, relative to max(|value|, 1)."""
    expected = torch.tensor(
        [
            [sandwich_value(int(d), h, encoding.n_heads, encoding.d_position) for d in distances]
            for h in range(encoding.n_heads)
        ],
        dtype=torch.float64,
    )
    got = encoding.distance_bias(distances)
    return float(((got - expected).abs() / expected.abs().clamp_min(1.0)).max())


@pytest.mark.parametrize(("n_heads", "d_position"), [(8, 128), (4, 16), (3, 2), (12, 64)])
def test_the_bias_matches_the_paper_formula_in_float64(n_heads, d_position):
    encoding = Sandwich(n_heads, d_position=d_position)
    assert _worst_error(encoding, NEAR) <= 1e-13
    # the loop multiplies d·ω in float64 (error ~ d·2^-53 rad per term); posenc's angles are exact
    assert _worst_error(encoding, FAR) <= 1e-9


def test_the_materialised_bias_is_the_float64_bias_rounded_once():
    encoding = Sandwich(4, d_position=32)
    q, k = torch.tensor([0, 5, 300, 2**20]), torch.tensor([-7, 0, 5, 299, 2**20 - 3, 2**21])
    expected = torch.tensor(sandwich_bias_loop(q.tolist(), k.tolist(), 4, 32), dtype=torch.float64)
    bias = encoding.bias(q, k)
    assert bias.dtype == torch.float32 and bias.shape == (4, 4, 6)
    torch.testing.assert_close(bias.to(torch.float64), expected, rtol=2**-24, atol=1e-6)


@pytest.mark.parametrize(
    "planted",
    [
        # the sum from k = 0 (ω_0 = 1, the sinusoidal table's first pair) instead of the paper's k = 1
        lambda d, base: sinusoidal_frequency_pieces(d, base),
        # every head scaled like head 1 (no ALiBi-like spread)
        None,
    ],
)
def test_a_planted_wrong_formula_is_caught_by_the_reference_comparison(monkeypatch, planted):
    if planted is None:
        monkeypatch.setattr(sandwich_module, "sandwich_head_scales", lambda n: torch.full((n,), n / 8.0))
    else:
        monkeypatch.setattr(sandwich_module, "sandwich_frequency_pieces", planted)
    assert _worst_error(Sandwich(8, d_position=64), NEAR) > 1e-3


def test_it_is_zero_at_distance_zero_negative_elsewhere_and_heads_are_one_curve_scaled():
    bias = Sandwich(8).distance_bias(torch.arange(1, 200))  # [h, n]
    assert bool((bias < 0).all()) and torch.equal(
        Sandwich(8).distance_bias(torch.tensor([0])), torch.zeros(8, 1)
    )
    for h in range(8):  # head h is head 0 divided by h + 1
        torch.testing.assert_close(bias[h] * (h + 1), bias[0], rtol=1e-15, atol=0)
    torch.testing.assert_close(
        Sandwich(8).distance_bias(-FAR), Sandwich(8).distance_bias(FAR), rtol=0, atol=0
    )


def test_the_bias_is_computed_per_distinct_distance_never_per_pair_and_frequency(monkeypatch):
    seen = []
    original = sandwich_module.reduced_angles

    def recording(positions, pieces, **kwargs):
        seen.append(positions.numel())
        return original(positions, pieces, **kwargs)

    monkeypatch.setattr(sandwich_module, "reduced_angles", recording)
    Sandwich(8).bias(torch.arange(512), torch.arange(512))
    assert seen == [512]  # the 512 distinct |i − j|, not the 262144 pairs


def test_the_compiled_path_gives_the_same_bias_pair_by_pair():
    encoding = Sandwich(4, d_position=32)
    distance = (torch.arange(40)[:, None] - torch.arange(40)[None, :]).abs()
    torch.testing.assert_close(
        encoding._pairwise_shifted_dot(distance), encoding.shifted_dot(distance), rtol=1e-14, atol=1e-13
    )


def test_batched_positions_and_the_score_mod_give_the_materialised_bias():
    encoding = Sandwich(4, d_position=32)
    q, k = torch.tensor([3, 9, 40]), torch.arange(41)
    bias = encoding.bias(q, k)
    torch.testing.assert_close(score_mod_bias(encoding, q, k), bias, rtol=0, atol=0)
    batched = encoding.bias(torch.stack((q, q + 100)), torch.stack((k, k + 100)))
    assert batched.shape == (2, 4, 3, 41) and torch.equal(batched[1], bias)


def test_far_apart_positions_use_the_materialised_bias_in_the_score_mod():
    # a table over every distance up to 2^21 would be far larger than these 6 scores
    encoding = Sandwich(2, d_position=16)
    q, k = torch.tensor([0, 2**21]), torch.tensor([5, 2**20, 2**21 - 1])
    torch.testing.assert_close(score_mod_bias(encoding, q, k), encoding.bias(q, k), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: Sandwich(0), ValueError, "n_heads must be positive, got 0"),
        (lambda: Sandwich(4, d_position=7), ValueError, "d_position must be even, got 7"),
        (lambda: Sandwich(4, d_position=0), ValueError, "d_position must be positive, got 0"),
        (lambda: Sandwich(4, d_position=8.0), TypeError, "d_position must be an integer, got 8.0"),
        (lambda: Sandwich(4, base=-2.0), ValueError, "base must be positive and finite, got -2.0"),
        (
            lambda: Sandwich(4).distance_bias(torch.tensor([2**27])),
            ValueError,
            "Sandwich's exact angles need |i − j| < 2^27 = 134217728, got 134217728",
        ),
        (
            lambda: Sandwich(4).score_mod(),
            ValueError,
            "Sandwich's score_mod reads a table of the bias per distance and needs q_positions and k_positions",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_value(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize("causal", [True, False])
def test_every_backend_gives_the_same_outputs_and_gradients(causal):
    assert_backends_agree(built("sandwich", causal=causal), causal=causal, positions=torch.arange(11) + 5)


@pytest.mark.parametrize("backend", ATTENTION)
def test_kv_cache_decoding_equals_the_full_forward(backend):
    assert_cache_decoding_equals_the_full_forward("sandwich", backend)


def test_properties_measure_an_explicit_relative_bias_within_one_rounding():
    result = properties(specimen("sandwich"))
    assert all(prop.verdict != "error" for prop in result.values()), result
    assert result["relative"].category == "explicit"
    assert result["precision"].holds is True  # exact angles at distances up to 2^21
    assert result["parameters"].holds is True and result["parameters"].value == 0
    assert result["decay"].holds is True


def test_it_has_no_parameters_and_builds_by_name():
    encoding = posenc.build("sandwich", n_heads=4, d_position=32)
    assert isinstance(encoding, Sandwich) and list(encoding.parameters()) == []
    assert encoding.count_parameters(0, 0, 0) == 0
