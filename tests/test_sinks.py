"""Learned sink logits (GPT-OSS): one logit per head in the softmax's denominator, on every backend against a
float64 loop, with gradients (gradcheck in float64) for the flash path and the layer's parameter."""

from __future__ import annotations

import pytest
import torch

from posenc.attention import BACKENDS, MultiHeadAttention
from posenc.sinks import sink_attention, sink_weights
from tests.reference.layer_loop import attend as loop_attend


def _layer(backend, **kwargs):
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2, backend=backend, sinks=torch.tensor([0.5, -1.0]), **kwargs).double()
    return attention


def _loop(q, k, v, sinks, **kwargs):
    b, h = q.shape[:2]
    return torch.tensor(
        [
            [
                loop_attend(
                    q[n, m].tolist(),
                    k[n, m].tolist(),
                    v[n, m].tolist(),
                    sink=float(sinks[m].detach()),
                    **kwargs,
                )
                for m in range(h)
            ]
            for n in range(b)
        ],
        dtype=torch.float64,
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spans", [{}, {"window": 3}, {"chunk": 4}], ids=str)
def test_sinks_match_the_loop_on_every_backend(backend, spans):
    attention = _layer(backend, **spans)
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(3, 2, 2, 9, 8, generator=g, dtype=torch.float64)
    expected = _loop(
        q, k, v, attention.sinks, scale=8**-0.5, window=spans.get("window"), chunk=spans.get("chunk")
    )
    torch.testing.assert_close(attention.attend(q, k, v, None, None), expected, atol=1e-12, rtol=1e-12)


def test_a_sink_takes_weight_from_every_key():
    scores = torch.zeros(1, 1, 1, 3, dtype=torch.float64)
    weights = sink_weights(scores, torch.tensor([0.0], dtype=torch.float64))
    torch.testing.assert_close(weights, torch.full((1, 1, 1, 3), 0.25, dtype=torch.float64))


@pytest.mark.parametrize("masked", [False, True])
def test_flash_path_with_sinks_passes_gradcheck(masked):
    g = torch.Generator().manual_seed(2)
    q, k, v = (t.requires_grad_() for t in torch.randn(3, 1, 2, 4, 2, generator=g, dtype=torch.float64))
    sinks = torch.randn(2, generator=g, dtype=torch.float64).requires_grad_()
    band = torch.ones(4, 4, dtype=torch.bool).tril() & ~torch.ones(4, 4, dtype=torch.bool).tril(-2)
    kwargs = {"attn_mask": band} if masked else {"is_causal": True}
    assert torch.autograd.gradcheck(
        lambda q, k, v, s: sink_attention(q, k, v, s, scale=0.5, **kwargs), (q, k, v, sinks)
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_layers_sinks_get_the_gradient_of_the_eager_reference(backend):
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    grads = []
    for name in ("eager", backend):
        attention = _layer(name, window=3)
        attention(x).pow(2).sum().backward()
        grads.append(attention.sinks.grad)
    assert grads[0].abs().min() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-12, rtol=1e-12)


def test_sinks_are_a_parameter_named_and_shaped_as_gpt_oss():
    attention = MultiHeadAttention(16, 4, sinks=True)
    assert attention.state_dict()["sinks"].shape == (4,)
    assert "sinks" not in MultiHeadAttention(16, 4).state_dict()


def test_sink_errors_name_the_value():
    with pytest.raises(ValueError, match=r"one logit per head \(4 heads\), got shape \(3,\)"):
        MultiHeadAttention(16, 4, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="sinks must be finite"):
        MultiHeadAttention(16, 2, sinks=[0.0, float("nan")])
    with pytest.raises(TypeError, match="sinks must be a bool"):
        MultiHeadAttention(16, 2, sinks="yes")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_with_sinks_decodes_with_a_kv_cache_to_its_full_forward(backend):
    from posenc.model import TransformerLM
    from posenc.stacks import layer

    torch.manual_seed(0)
    model = TransformerLM(
        40, d_model=16, n_heads=2, n_layers=1, layers=layer("rope", sinks=[1.0, -0.5]), backend=backend
    ).double()
    tokens = torch.randint(0, 40, (2, 9))
    caches = model.new_caches()
    steps = torch.cat(
        [model(tokens[:, :3], caches=caches)]
        + [model(tokens[:, t : t + 1], caches=caches) for t in range(3, 9)],
        1,
    )
    torch.testing.assert_close(steps, model(tokens), atol=1e-12, rtol=1e-12)
