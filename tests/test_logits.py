"""Gemma's query pre-attention scalar and logit soft-capping: the layer against a float64 loop of attention
with logits c·tanh(q·kᵀ·n^(−½) / c) on the backends that take them, sdpa's refusal of a cap, a scale the
encoding changes (DeepSeek's YaRN) kept, gradients, torch.compile with symbolic shapes, and the refusals."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import build
from posenc.attention import MultiHeadAttention
from posenc.qk_norm import QKNorm
from posenc.stacks import layer
from tests.reference.layer_loop import attend as loop_attend


def _loop(q, k, v, **kwargs):
    b, h, h_kv = q.shape[0], q.shape[1], k.shape[1]
    return torch.tensor(
        [
            [
                loop_attend(
                    q[n, m].tolist(),
                    k[n, m // (h // h_kv)].tolist(),
                    v[n, m // (h // h_kv)].tolist(),
                    **kwargs,
                )
                for m in range(h)
            ]
            for n in range(b)
        ],
        dtype=torch.float64,
    )


def _qkv(seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) * scale
    k, v = torch.randn(2, 2, 2, 9, 8, generator=g, dtype=torch.float64) * scale
    return q, k, v


@pytest.mark.parametrize("backend", ["eager", "flex"])
@pytest.mark.parametrize("spans", [{}, {"window": 3}, {"chunk": 4}, {"sinks": True}], ids=str)
def test_capped_logits_at_gemmas_scale_match_the_loop(backend, spans):
    attention = MultiHeadAttention(
        32, 4, n_kv_heads=2, backend=backend, query_pre_attn_scalar=12, softcap=2.0, **spans
    ).double()
    q, k, v = _qkv(scale=2.0)  # logits up to ~10: the cap of 2 bends most of them
    sink = {} if "sinks" not in spans else {"sink": 0.0}
    expected = _loop(
        q, k, v, scale=12**-0.5, softcap=2.0, window=spans.get("window"), chunk=spans.get("chunk"), **sink
    )
    torch.testing.assert_close(attention.attend(q, k, v, None, None), expected, atol=1e-12, rtol=1e-12)
    uncapped = _loop(q, k, v, scale=12**-0.5, window=spans.get("window"), chunk=spans.get("chunk"), **sink)
    assert (uncapped - expected).abs().max() > 1e-2  # the cap acts at these logits


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize("spans", [{}, {"window": 3}], ids=str)
def test_query_pre_attn_scalar_scales_the_logits_on_every_backend(backend, spans):
    attention = MultiHeadAttention(
        32, 4, n_kv_heads=2, backend=backend, query_pre_attn_scalar=3, **spans
    ).double()
    q, k, v = _qkv()
    expected = _loop(q, k, v, scale=3**-0.5, window=spans.get("window"))
    torch.testing.assert_close(attention.attend(q, k, v, None, None), expected, atol=1e-12, rtol=1e-12)


def test_the_scalar_keeps_a_scale_the_encoding_changes():
    # DeepSeek's YaRN scales the logits by mscale²: with the scalar n they are mscale²·n^(−½)
    yarn = {"factor": 4.0, "original_max_position_embeddings": 16, "mscale_all_dim": 1.0}
    rope = build("rope", d_head=8, scaling="deepseek_yarn", scaling_args=yarn)
    attention = MultiHeadAttention(32, 4, n_kv_heads=2, encoding=rope, query_pre_attn_scalar=20).double()
    q, k, v = _qkv()
    mscale = 0.1 * 1.0 * math.log(4.0) + 1  # DeepSeek-V2's mscale(factor, mscale_all_dim)
    expected = _loop(q, k, v, scale=mscale**2 * 20**-0.5)
    torch.testing.assert_close(attention.attend(q, k, v, None, None), expected, atol=1e-12, rtol=1e-12)


def test_eager_and_flex_cap_the_biased_logits_alike():
    # the cap takes q·kᵀ·scale + bias: ALiBi's bias is capped with the rest, on both backends
    outputs = []
    for backend in ("eager", "flex"):
        torch.manual_seed(0)
        attention = MultiHeadAttention(
            32, 4, backend=backend, encoding=build("alibi", n_heads=4), softcap=1.5
        )
        outputs.append(
            attention.double()(
                torch.randn(2, 9, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
            )
        )
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "flex"])
def test_capped_attention_passes_gradcheck(backend):
    attention = MultiHeadAttention(
        8, 2, backend=backend, query_pre_attn_scalar=3, softcap=1.0, window=3
    ).double()
    g = torch.Generator().manual_seed(4)
    q, k, v = (
        torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )
    assert torch.autograd.gradcheck(lambda q, k, v: attention.attend(q, k, v, None, None), (q, k, v))


def _compiled_layer_equals_eager(backend: str, backward: bool) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    attention = MultiHeadAttention(
        16,
        2,
        backend="eager",
        encoding=build("rope", d_head=8),
        qk_norm=QKNorm(weight="unit_offset"),
        query_pre_attn_scalar=12,
        softcap=3.0,
        window=4,
    )
    compiled = torch.compile(attention, fullgraph=True, dynamic=True, backend=backend)
    with torch._dynamo.config.patch(error_on_recompile=True):  # a shape guard would recompile at 9
        _run_twice(compiled, attention, backward)


def _run_twice(compiled, attention, backward: bool) -> None:
    for s in (7, 9):  # a second length runs the same symbolic graph
        x = torch.randn(2, s, 16, generator=torch.Generator().manual_seed(s))
        out = compiled(x)
        if not backward:
            torch.testing.assert_close(out, attention(x), atol=1e-5, rtol=1e-5)
            continue
        out.square().sum().backward()
        grads = [p.grad.clone() for p in attention.parameters()]
        attention.zero_grad()
        expected = attention(x)
        expected.square().sum().backward()
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        for got, want in zip(grads, [p.grad for p in attention.parameters()], strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        attention.zero_grad()


def test_a_layer_traces_whole_with_symbolic_shapes():
    _compiled_layer_equals_eager("eager", backward=False)  # dynamo alone: no graph break, no shape guard


@pytest.mark.slow
def test_a_layer_compiles_with_symbolic_shapes_forward_and_backward():
    _compiled_layer_equals_eager("aot_eager", backward=True)


def test_a_cap_is_refused_on_sdpa_naming_the_backend_even_when_set_later():
    with pytest.raises(ValueError, match="softcap=30.0 caps the logits, which backend='sdpa' never holds"):
        MultiHeadAttention(16, 2, softcap=30)
    attention = MultiHeadAttention(16, 2, backend="eager", softcap=30)
    attention.backend = "sdpa"  # as the lab's training sets a model's backend
    with pytest.raises(ValueError, match="use backend='eager' or 'flex'"):
        attention(torch.randn(1, 3, 16))


@pytest.mark.parametrize("name", ["query_pre_attn_scalar", "softcap"])
def test_logit_options_name_a_bad_value(name):
    for value, error, message in [
        (0, ValueError, "must be positive and finite, got 0.0"),
        (-2.0, ValueError, "must be positive and finite, got -2.0"),
        (float("inf"), ValueError, "must be positive and finite, got inf"),
        ("50", TypeError, "must be a real number, got '50'"),
        (True, TypeError, "must be a real number, got True"),
    ]:
        with pytest.raises(error, match=f"{name} {message}"):
            MultiHeadAttention(16, 2, backend="eager", **{name: value})
        with pytest.raises(error, match=f"{name} {message}"):
            layer("rope", **{name: value})
