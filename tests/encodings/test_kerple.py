"""Kerple (Chi et al., 2022): both kernels against the paper's formula in float64, the domain the authors
keep, every attention backend, KV-cache decoding, gradients, and the inputs it refuses."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
import posenc.encodings.kerple as kerple_module
from posenc.analysis import properties, specimen
from posenc.backends import ATTENTION
from posenc.encodings.kerple import INIT_SCALES, PROJECTION_FLOOR, Kerple
from tests.encodings.bias_checks import (
    assert_backends_agree,
    assert_cache_decoding_equals_the_full_forward,
    built,
    model_gradients,
    score_mod_bias,
)
from tests.reference.kerple_loop import kerple_bias_loop, kerple_value

R1 = [0.3, 1.7, 0.05, 1.0]
R2 = {"log": [0.9, 0.02, 3.5, 0.25], "power": [1.0, 0.5, 2.0, 0.01]}
Q_POSITIONS = torch.tensor([0, 3, 17, 250, 4096])
K_POSITIONS = torch.tensor([-5, 0, 2, 17, 300, 4095, 2**20])


def _worst_errors(encoding: Kerple) -> tuple[float, float]:
    """(float64 per-distance error, float32 bias error relative to its values) against the paper's loop."""
    r1, r2 = encoding.r1.tolist(), encoding.r2.tolist()
    expected = torch.tensor(
        kerple_bias_loop(Q_POSITIONS.tolist(), K_POSITIONS.tolist(), r1, r2, encoding.variant),
        dtype=torch.float64,
    )  # [h, i, j]
    distances = Q_POSITIONS[:, None] - K_POSITIONS[None, :]
    with torch.no_grad():
        per_distance = encoding.distance_bias(distances.flatten()).view_as(expected)
        materialised = encoding.bias(Q_POSITIONS, K_POSITIONS).to(torch.float64)
    scale = expected.abs().clamp_min(1.0)
    return (
        float(((per_distance - expected).abs() / scale).max()),
        float(((materialised - expected).abs() / scale).max()),
    )


@pytest.mark.parametrize("variant", ["log", "power"])
def test_both_kernels_match_the_paper_formula_in_float64(variant):
    encoding = Kerple(4, variant=variant, r1=R1, r2=R2[variant])
    per_distance, materialised = _worst_errors(encoding)
    assert per_distance <= 1e-13  # float64 against float64
    assert materialised <= 2**-24  # one float32 rounding


@pytest.mark.parametrize("variant", ["log", "power"])
def test_a_planted_wrong_kernel_is_caught_by_the_reference_comparison(monkeypatch, variant):
    # r1 and r2 swapped (a plausible slip: the authors' code names them bias_p and bias_a)
    original = kerple_module.kerple_scores
    monkeypatch.setattr(
        kerple_module,
        "kerple_scores",
        lambda d, r1, r2, *, variant="log": original(d, r2, r1, variant=variant),
    )
    per_distance, materialised = _worst_errors(Kerple(4, variant=variant, r1=R1, r2=R2[variant]))
    assert per_distance > 1e-2 and materialised > 1e-2


def test_a_planted_sign_error_is_caught_by_the_reference_comparison(monkeypatch):
    original = kerple_module.kerple_scores
    monkeypatch.setattr(kerple_module, "kerple_scores", lambda *args, **kwargs: -original(*args, **kwargs))
    assert min(_worst_errors(Kerple(4, r1=R1, r2=R2["log"]))) > 1e-2


@pytest.mark.parametrize("variant", ["log", "power"])
def test_score_mod_and_batched_positions_give_the_materialised_bias(variant):
    encoding = Kerple(4, variant=variant, r1=R1, r2=R2[variant])
    with torch.no_grad():
        bias = encoding.bias(Q_POSITIONS, K_POSITIONS)  # [h, i, j]
        torch.testing.assert_close(score_mod_bias(encoding, Q_POSITIONS, K_POSITIONS), bias, rtol=0, atol=0)
        batched = encoding.bias(
            torch.stack((Q_POSITIONS, Q_POSITIONS + 9)), torch.stack((K_POSITIONS, K_POSITIONS + 9))
        )
    assert batched.shape == (2, 4, 5, 7)
    torch.testing.assert_close(batched[1], bias, rtol=0, atol=0)  # a shift of both changes nothing


def test_the_kernel_is_symmetric_and_zero_at_distance_zero():
    encoding = Kerple(4, r1=R1, r2=R2["log"])
    with torch.no_grad():
        bias = encoding.bias(torch.arange(9), torch.arange(9))
    torch.testing.assert_close(bias, bias.transpose(-1, -2), rtol=0, atol=0)
    assert torch.equal(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(4, 9))
    assert bool((bias <= 0).all())


@pytest.mark.parametrize("variant", ["log", "power"])
def test_the_authors_initialisation_is_uniform_per_head_inside_the_domain(variant):
    torch.manual_seed(0)
    encoding = Kerple(64, variant=variant)
    for parameter, scale in zip(
        (encoding.r1.detach(), encoding.r2.detach()), INIT_SCALES[variant], strict=True
    ):
        assert bool((parameter >= PROJECTION_FLOOR).all()) and bool((parameter <= scale).all())  # in float32
        assert len(set(parameter.tolist())) > 32  # drawn per head


def test_parameters_that_training_pushed_out_of_the_domain_are_projected_back_before_use():
    encoding = Kerple(4, variant="power", r1=R1, r2=R2["power"])
    with torch.no_grad():
        encoding.r1[0] = -0.5
        encoding.r2[1] = 3.0
    encoding.bias(torch.arange(3), torch.arange(3))
    assert encoding.r1[0].item() == pytest.approx(PROJECTION_FLOOR) and encoding.r2[1].item() == 2.0
    assert encoding.r1[1:].tolist() == pytest.approx(R1[1:])  # those inside are untouched


def test_a_projection_that_changes_nothing_leaves_earlier_graphs_usable():
    # one encoding shared by the layers: the second layer's bias must not invalidate the first one's graph
    encoding = Kerple(4, r1=R1, r2=R2["log"])
    first = encoding.bias(torch.arange(5), torch.arange(5))
    second = encoding.distance_bias(torch.arange(5))
    (first.sum() + second.sum()).backward()
    assert encoding.r1.grad is not None and bool(torch.isfinite(encoding.r2.grad).all())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"variant": "exp"}, ValueError, "variant must be one of 'log', 'power'; got 'exp'"),
        ({"r1": 0.0}, ValueError, "r1 must be positive and finite, got 0.0"),
        ({"r1": -1.0}, ValueError, "r1 must be positive and finite, got -1.0"),
        ({"r1": 0.001}, ValueError, "r1 must be ≥ 0.01 (Kerple's parameters are projected onto [0.01, ∞)"),
        ({"r2": float("inf")}, ValueError, "r2 must be positive and finite, got inf"),
        ({"variant": "power", "r2": 2.5}, ValueError, "r2 must be in (0, 2] for the power variant"),
        ({"r2": [0.5, 0.5, 2.5, 0.5], "variant": "power"}, ValueError, "r2[2] must be in (0, 2]"),
        ({"r1": [1.0, 2.0]}, ValueError, "r1 must hold n_heads = 4 values, got 2"),
        ({"r1": "big"}, TypeError, "r1 must be a sequence of 4 numbers, got 'big'"),
    ],
)
def test_parameters_outside_the_domain_are_refused_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        Kerple(4, **kwargs)


def test_a_log_kernel_accepts_any_positive_r2():
    assert Kerple(2, r2=7.5).r2.tolist() == [7.5, 7.5]  # only the power variant is bounded by 2


@pytest.mark.parametrize("variant", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_every_backend_gives_the_same_outputs_and_gradients(variant, causal):
    assert_backends_agree(
        built("kerple", causal=causal, variant=variant), causal=causal, positions=torch.arange(11) + 5
    )


@pytest.mark.parametrize("backend", ATTENTION)
def test_kv_cache_decoding_equals_the_full_forward(backend):
    assert_cache_decoding_equals_the_full_forward("kerple", backend)


@pytest.mark.parametrize("backend", ATTENTION)
def test_gradients_reach_r1_and_r2_on_every_backend(backend):
    grads = model_gradients("kerple", backend)  # sdpa on CPU: the per-distance path
    assert set(grads) == {"r1", "r2"}
    for grad in grads.values():
        assert grad is not None and bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0


def test_the_power_kernel_has_a_finite_gradient_at_distance_zero():
    encoding = Kerple(2, variant="power", r1=1.0, r2=0.5)
    encoding.bias(torch.arange(4), torch.arange(4)).sum().backward()
    assert bool(torch.isfinite(encoding.r2.grad).all())


def test_properties_measure_an_explicit_relative_bias_within_one_rounding():
    result = properties(specimen("kerple"))
    assert all(prop.verdict != "error" for prop in result.values()), result
    assert result["relative"].category == "explicit"
    assert result["precision"].holds is True and result["parameters"].holds is True
    assert result["parameters"].value == 2 * 8
    assert result["decay"].holds is True  # the log kernel always decays


def test_build_by_name_and_the_value_at_one_distance():
    encoding = posenc.build("kerple", n_heads=1, variant="power", r1=0.5, r2=1.5)
    value = encoding.distance_bias(torch.tensor([4]))[0, 0].item()
    assert value == pytest.approx(kerple_value(4, 0.5, 1.5, "power"), rel=1e-7)
