"""The blocked flash attention and its own backward: outputs and every gradient (q, k, v and the bias, a
materialised mask or a per-distance table) equal float64 SDPA, in every layout of the calls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import posenc.kernels.blocked as blocked
from posenc.kernels.blocked import biased_attention
from posenc.kernels.per_distance import _antidiagonal_sums, per_distance_attention


def _qkv(b, h, h_kv, s_q, s_k, d, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = ((b, h, s_q, d), (b, h_kv, s_k, d), (b, h_kv, s_k, d))
    return [torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_() for shape in shapes]


def _grads(run, leaves, grad_out):
    for leaf in leaves:
        leaf.grad = None
    out = run()
    out.backward(grad_out.to(out.dtype))
    return [out.detach().double()] + [leaf.grad.double() for leaf in leaves]


def _reference(q, k, v, mask):
    """float64 SDPA (its math backend, the mask's gradient included)."""
    return F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask.double(), enable_gqa=q.shape[1] != k.shape[1]
    )


def _hide_later_keys(bias, s_q, s_k):
    later = torch.arange(s_k - s_q, s_k)[:, None] < torch.arange(s_k)[None, :]  # [i, j]
    return bias.masked_fill(later, float("-inf"))


CASES = [  # b, h, h_kv, s_q, s_k, causal
    (2, 4, 4, 37, 37, True),
    (2, 4, 2, 5, 40, True),
    (1, 3, 3, 30, 30, False),
    (3, 2, 1, 1, 9, True),
]


@pytest.mark.parametrize("mask_shape", ["[h, i, j]", "[b, h, i, j]", "[b, 1, i, j]", "[i, j]"])
@pytest.mark.parametrize(("b", "h", "h_kv", "s_q", "s_k", "causal"), CASES)
def test_a_materialised_bias_and_its_gradient_match_float64_sdpa(
    b, h, h_kv, s_q, s_k, causal, mask_shape, monkeypatch
):
    monkeypatch.setattr(blocked, "BACKWARD_ROWS", 8)  # several steps per call
    q, k, v = _qkv(b, h, h_kv, s_q, s_k, 8, torch.float64)
    shape = {"[h, i, j]": (h, s_q, s_k), "[b, h, i, j]": (b, h, s_q, s_k), "[b, 1, i, j]": (b, 1, s_q, s_k)}
    bias = torch.randn(*shape.get(mask_shape, (s_q, s_k)), dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(b, h, s_q, 8, dtype=torch.float64)

    def masked():
        return _hide_later_keys(bias, s_q, s_k) if causal else bias * 1

    leaves = [q, k, v, bias]
    got = _grads(lambda: biased_attention(q, k, v, masked(), causal=causal, block=16), leaves, grad_out)
    expected = _grads(lambda: _reference(q, k, v, masked()), leaves, grad_out)
    for name, a, e in zip(("out", "q", "k", "v", "bias"), got, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("learned", [True, False])
@pytest.mark.parametrize(("b", "h", "h_kv", "s_q", "s_k", "causal"), CASES)
def test_a_per_distance_table_and_its_gradient_match_float64_sdpa(b, h, h_kv, s_q, s_k, causal, learned):
    q, k, v = _qkv(b, h, h_kv, s_q, s_k, 8, torch.float64)
    values = torch.randn(h, 2 * s_k + 1, dtype=torch.float64, requires_grad=learned)  # distance δ at δ + s_k
    grad_out = torch.randn(b, h, s_q, 8, dtype=torch.float64)
    distance = torch.arange(s_k - s_q, s_k)[:, None] - torch.arange(s_k)[None, :]  # [i, j]

    def dense():
        bias = values[:, distance + s_k]  # [h, i, j]
        return _hide_later_keys(bias, s_q, s_k) if causal else bias

    leaves = [q, k, v, values] if learned else [q, k, v]
    got = _grads(
        lambda: per_distance_attention(q, k, v, lambda d: values[:, d + s_k], causal=causal, block=16),
        leaves,
        grad_out,
    )
    expected = _grads(lambda: _reference(q, k, v, dense()), leaves, grad_out)
    for name, a, e in zip(("out", "q", "k", "v", "table"), got, expected, strict=False):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-12, msg=name)


def test_windows_keep_their_gradients_exact_where_the_left_out_keys_weigh_nothing():
    q, k, v = _qkv(1, 2, 2, 20, 20, 4, torch.float64)
    steep = torch.tensor([[0.0], [1.0]], dtype=torch.float64) * -1e3  # head 1: far keys weigh e^-1000
    grad_out = torch.randn(1, 2, 20, 4, dtype=torch.float64)

    def bias(distances):
        return steep * distances.abs().to(torch.float64)[None, :]

    def run(windows):
        return per_distance_attention(q, k, v, bias, block=8, windows=windows)

    windowed = _grads(lambda: run([None, 2]), [q, k, v], grad_out)
    full = _grads(lambda: run(None), [q, k, v], grad_out)
    for a, e in zip(windowed, full, strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float32_and_bfloat16_stay_within_their_rounding_of_float64(dtype):
    q, k, v = _qkv(2, 4, 4, 64, 64, 16, dtype)
    values = torch.randn(4, 129, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(2, 4, 64, 16, dtype=torch.float64)
    table = lambda d: values[:, d + 64]  # noqa: E731
    got = _grads(lambda: per_distance_attention(q, k, v, table, block=16), [q, k, v, values], grad_out)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected = _grads(
        lambda: per_distance_attention(q64, k64, v64, table, block=16), [q64, k64, v64, values], grad_out
    )
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 0.1}[dtype]
    for a, e in zip(got, expected, strict=True):
        assert float((a - e).abs().max()) <= tolerance * max(1.0, float(e.abs().max()))


def test_inference_runs_no_autograd_function():
    q, k, v = _qkv(1, 2, 2, 10, 10, 4, torch.float32)
    with torch.no_grad():
        out = per_distance_attention(q, k, v, lambda d: torch.zeros(2, d.numel()))
    assert out.grad_fn is None
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-6
    )


def test_antidiagonal_sums_sum_each_anti_diagonal():
    x = torch.arange(2 * 3 * 4, dtype=torch.float64).view(2, 3, 4)
    expected = torch.zeros(2, 6, dtype=torch.float64)
    for r in range(3):
        for c in range(4):
            expected[:, r + c] += x[:, r, c]
    torch.testing.assert_close(_antidiagonal_sums(x), expected, rtol=0, atol=0)
