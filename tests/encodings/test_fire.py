"""FIRE (Li et al., 2024): the bias against the paper's formula in float64, the MLP evaluated piecewise (never
per pair), progressive interpolation past the threshold, every attention backend, KV-cache decoding,
gradients, and the inputs it refuses."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import posenc
import posenc.encodings.fire as fire_module
from posenc.analysis import properties, specimen
from posenc.backends import ATTENTION
from posenc.encodings.fire import FIRE, relu_mlp_pieces
from tests.encodings.bias_checks import (
    assert_backends_agree,
    assert_cache_decoding_equals_the_full_forward,
    built,
    model_gradients,
    score_mod_bias,
)
from tests.reference.fire_loop import fire_bias_loop

ORIGINAL_INPUTS = fire_module.fire_inputs
Q_POSITIONS = torch.tensor([0, 1, 7, 12, 13, 40, 1000])
K_POSITIONS = torch.tensor([0, 1, 5, 12, 30, 999, 1500])  # keys after a query too (bidirectional use)


def _fire(**kwargs) -> FIRE:
    torch.manual_seed(0)
    encoding = FIRE(3, **({"hidden": 8, "c": 0.3, "threshold": 12.0} | kwargs))
    with torch.no_grad():
        encoding.threshold_scale.fill_(-1.25)  # as training may leave it: L = |m|·L₀ = 15
        encoding.c.fill_(-0.2)  # ψ uses |c|
    return encoding


def _worst_error(encoding: FIRE, q: torch.Tensor = Q_POSITIONS, k: torch.Tensor = K_POSITIONS) -> float:
    """max |bias − the paper's float64 loop| at the encoding's current parameters."""
    first, second = encoding.mlp[0], encoding.mlp[2]
    expected = fire_bias_loop(
        q.tolist(),
        k.tolist(),
        c=abs(encoding.c.item()),
        threshold=abs(encoding.threshold_scale.item()) * encoding.initial_threshold,
        eps=encoding.eps,
        w=first.weight[:, 0].tolist(),
        b=first.bias.tolist(),
        v=second.weight.tolist(),
        a=second.bias.tolist(),
    )
    with torch.no_grad():
        bias = encoding.bias(q, k).to(torch.float64)
    return float((bias - torch.tensor(expected, dtype=torch.float64)).abs().max())


def test_the_bias_matches_the_paper_formula_in_float64():
    encoding = _fire()
    assert encoding.bias(Q_POSITIONS, K_POSITIONS).shape == (3, 7, 7)
    assert _worst_error(encoding) <= 2e-6  # float32 pieces of an MLP whose values are O(1)


def test_the_default_sizes_match_the_paper_formula_too():
    torch.manual_seed(1)
    assert _worst_error(FIRE(8)) <= 2e-6  # 32 hidden units, c = 0.1, L = 512


@pytest.mark.parametrize(
    "planted",
    [
        # normalised by the key's position instead of the query's
        lambda q, k, c, threshold, eps=1e-6: ORIGINAL_INPUTS(k, q, c, threshold, eps=eps).transpose(-1, -2),
        # ψ without the log: c·x
        lambda q, k, c, threshold, eps=1e-6: (
            (q[:, None] - k[None, :]).abs().double()
            * c.double()
            / (c.double() * torch.maximum(q.double(), threshold.double()))[:, None]
        ),
    ],
)
def test_a_planted_wrong_formula_is_caught_by_the_reference_comparison(monkeypatch, planted):
    monkeypatch.setattr(fire_module, "fire_inputs", planted)
    assert _worst_error(_fire()) > 1e-3


def test_the_piecewise_mlp_is_the_mlp_in_value_and_gradient():
    torch.manual_seed(2)
    first, second = nn.Linear(1, 32), nn.Linear(32, 5)
    with torch.no_grad():  # units that never switch: one always on, one always off
        first.weight[3], first.bias[3] = 0.0, 0.7
        first.weight[4], first.bias[4] = 0.0, -0.7
    x = torch.linspace(-3, 3, 4001, dtype=torch.float64)
    direct = second(torch.relu(first(x.float()[:, None])))  # [n, h]
    crossings, slopes, intercepts = relu_mlp_pieces(first, second)
    piece = torch.searchsorted(crossings, x)
    piecewise = (slopes[:, piece] * x + intercepts[:, piece]).T  # [n, h]
    torch.testing.assert_close(piecewise.float(), direct, rtol=0, atol=1e-6)
    grads = []
    for values in (direct, piecewise):
        first.zero_grad(), second.zero_grad()
        (values.float() * torch.linspace(-1, 1, 5)).sum().backward()
        grads.append([p.grad.clone() for p in (*first.parameters(), *second.parameters())])
    for got, expected in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)  # sums of 4001 float32 terms


def test_the_bias_never_runs_the_mlp_per_pair(monkeypatch):
    encoding = FIRE(8)

    def refuse(*args):
        raise AssertionError("the MLP ran on a tensor of pairs: [i, j, hidden] activations")

    monkeypatch.setattr(encoding.mlp, "forward", refuse)
    bias = encoding.bias(torch.arange(2048), torch.arange(2048))
    assert bias.shape == (8, 2048, 2048) and bias.dtype == torch.float32


def test_below_the_threshold_it_depends_on_the_distance_and_past_it_on_the_query_too():
    encoding = FIRE(2, threshold=32.0)
    with torch.no_grad():
        bias = encoding.bias(torch.arange(100), torch.arange(100))  # [h, i, j]
    torch.testing.assert_close(bias[:, 20, 10], bias[:, 30, 20], rtol=0, atol=0)  # queries below L
    x = encoding.inputs(torch.tensor([40, 90]), torch.tensor([0, 50])).detach()  # [2, 2]
    assert x[0, 0].item() == pytest.approx(1.0, abs=1e-6) and x[1, 0].item() == pytest.approx(1.0, abs=1e-6)
    assert not torch.equal(bias[:, 50, 40], bias[:, 90, 80])  # the same distance, queries past L


def test_every_key_a_query_sees_maps_into_the_unit_interval():
    x = FIRE(2, threshold=8.0).inputs(torch.arange(300), torch.arange(300)).detach()
    causal = torch.ones(300, 300, dtype=torch.bool).tril()
    assert float(x[causal].min()) == 0.0 and float(x[causal].max()) <= 1.0


def test_batched_positions_and_the_score_mod_give_the_materialised_bias():
    encoding = _fire()
    with torch.no_grad():
        bias = encoding.bias(Q_POSITIONS, K_POSITIONS)
        torch.testing.assert_close(score_mod_bias(encoding, Q_POSITIONS, K_POSITIONS), bias, rtol=0, atol=0)
        batched = encoding.bias(
            torch.stack((Q_POSITIONS, Q_POSITIONS)), torch.stack((K_POSITIONS, K_POSITIONS))
        )
    assert batched.shape == (2, 3, 7, 7) and torch.equal(batched[1], bias)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"c": 0.0}, ValueError, "c must be positive and finite, got 0.0"),
        ({"c": -0.1}, ValueError, "c must be positive and finite, got -0.1"),
        ({"threshold": -5.0}, ValueError, "threshold must be positive and finite, got -5.0"),
        ({"threshold": float("inf")}, ValueError, "threshold must be positive and finite, got inf"),
        ({"hidden": 0}, ValueError, "hidden must be positive, got 0"),
        ({"hidden": 2.5}, TypeError, "hidden must be an integer, got 2.5"),
        ({"eps": -1e-6}, ValueError, "eps must be non-negative and finite, got -1e-06"),
        ({"c": "small"}, TypeError, "c must be a real number, got 'small'"),
    ],
)
def test_parameters_outside_their_domain_are_refused_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        FIRE(4, **kwargs)


def test_model_arguments_start_the_threshold_at_the_training_length():
    assert FIRE.model_arguments(d_model=64, n_heads=8, max_len=256, causal=True) == {
        "n_heads": 8,
        "threshold": 256.0,
    }
    assert FIRE(4).threshold().item() == 512.0  # the authors' default L₀


@pytest.mark.parametrize("causal", [True, False])
def test_every_backend_gives_the_same_outputs_and_gradients(causal):
    # threshold 8: queries at positions 5 … 15 cross it, so the bias depends on the query
    assert_backends_agree(
        built("fire", causal=causal, threshold=8.0), causal=causal, positions=torch.arange(11) + 5
    )


@pytest.mark.parametrize("backend", ATTENTION)
def test_kv_cache_decoding_equals_the_full_forward(backend):
    assert_cache_decoding_equals_the_full_forward("fire", backend, threshold=4.0)


@pytest.mark.parametrize("backend", ATTENTION)
def test_gradients_reach_the_mlp_c_and_the_threshold_on_every_backend(backend):
    grads = model_gradients("fire", backend)
    assert set(grads) == {"c", "threshold_scale", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}
    for name, grad in grads.items():
        assert grad is not None and bool(torch.isfinite(grad).all()), name
        if name != "threshold_scale":  # L = 64 (max_len) is beyond these 12 positions: no gradient yet
            assert float(grad.abs().sum()) > 0, name


def test_the_threshold_learns_once_queries_pass_it():
    encoding = FIRE(2, threshold=4.0)
    encoding.bias(torch.arange(12), torch.arange(12)).square().sum().backward()
    assert float(encoding.threshold_scale.grad.abs()) > 0


def test_properties_are_measured_without_error():
    result = properties(specimen("fire"))
    assert all(prop.verdict != "error" for prop in result.values()), result
    assert result["relative"].holds is False  # past the threshold the query's position matters
    assert result["parameters"].holds is True and result["parameters"].value == 32 * (8 + 2) + 8 + 2
    assert result["precision"].holds is None  # no per-distance view


def test_it_builds_by_name_and_gives_no_distance_bias():
    encoding = posenc.build("fire", n_heads=4, hidden=16)
    assert isinstance(encoding, FIRE) and "distance_bias" not in encoding.views
    assert encoding.count_parameters(0, 0, 0) == sum(p.numel() for p in encoding.parameters()) == 16 * 6 + 6
