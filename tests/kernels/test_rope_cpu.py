"""The CPU fast path for RoPE on q and k returns what functional apply_rope returns."""

from __future__ import annotations

import pytest
import torch

from posenc.functional.rope import apply_rope, rope_cos_sin, rope_inv_freq
from posenc.kernels import rope_cpu
from posenc.kernels.rope_cpu import apply_rope_qk, native_available

LAYOUTS = ("half", "interleaved")
needs_native = pytest.mark.skipif(not native_available(), reason="the C kernel does not build here")


def _qk(shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).to(dtype) for _ in range(2))


def _angles(length, rotary_dim, batch=None):
    inv_freq, _ = rope_inv_freq(rotary_dim)
    positions = torch.arange(length) if batch is None else torch.arange(batch * length).view(batch, length)
    return rope_cos_sin(positions * 37, inv_freq)  # [(b,) s, r/2]; large angles


def _half_ulps(got: torch.Tensor, exact: torch.Tensor) -> float:
    """max |got − exact| in halves of got's dtype unit at each exact value: ≤ 1 is one correct rounding."""
    info = torch.finfo(got.dtype)
    ulp = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(info.tiny)))) * info.eps
    return float(((got.double() - exact).abs() / (ulp / 2)).max())


def _reference(q, k, cos, sin, **kwargs):
    return apply_rope(q, cos, sin, backend="reference", **kwargs), apply_rope(
        k, cos, sin, backend="reference", **kwargs
    )


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [None, 10])
@pytest.mark.parametrize("inplace", [False, True])
def test_c_kernel_is_bit_identical_to_apply_rope_in_float32_and_float64(dtype, layout, rotary_dim, inplace):
    q, k = _qk((2, 3, 7, 16), dtype)
    cos, sin = _angles(7, rotary_dim or 16)
    expected = _reference(q, k, cos, sin, layout=layout, rotary_dim=rotary_dim)
    got = apply_rope_qk(
        q, k, cos, sin, layout=layout, rotary_dim=rotary_dim, inplace=inplace, backend="native"
    )
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e)


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("inplace", [False, True])
def test_c_kernel_rounds_bfloat16_once_from_the_float32_result(layout, inplace):
    q, k = _qk((2, 4, 9, 32), torch.bfloat16)
    cos, sin = _angles(9, 32)
    inputs = [x.clone() for x in (q, k)]
    once = [
        apply_rope(x.float(), cos, sin, layout=layout, backend="reference").to(torch.bfloat16) for x in inputs
    ]
    products = _reference(q, k, cos, sin, layout=layout)  # bf16 products, as the models do
    exact = [
        apply_rope(x.double(), cos.double(), sin.double(), layout=layout, backend="reference") for x in inputs
    ]
    got = apply_rope_qk(q, k, cos, sin, layout=layout, inplace=inplace, backend="native")
    for g, o, p, e, x in zip(got, once, products, exact, inputs, strict=True):
        assert torch.equal(g, o)
        assert (g.double() - p.double()).abs().max() <= 2**-7 * x.abs().max()  # a bf16 unit of |x|
        assert (g.double() - e).abs().max() <= (p.double() - e).abs().max()  # and closer to exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("inplace", [False, True])
def test_eager_fallback_agrees_with_apply_rope(dtype, layout, inplace):
    q, k = _qk((2, 3, 5, 12), dtype)
    cos, sin = _angles(5, 8)
    expected = _reference(q, k, cos, sin, layout=layout, rotary_dim=8)
    exact = [
        apply_rope(x.double(), cos.double(), sin.double(), layout=layout, rotary_dim=8, backend="reference")
        for x in (q, k)
    ]
    got = apply_rope_qk(q, k, cos, sin, layout=layout, rotary_dim=8, inplace=inplace, backend="eager")
    for g, e, x in zip(got, expected, exact, strict=True):
        assert g.dtype == dtype
        if dtype == torch.float32:
            torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
        else:  # the documented numerics: the float32 rotation rounded once, so within half a unit of exact
            # (the float32 rotation's own error, ~1e-7 relative, can add a hair at a tie)
            assert _half_ulps(g, x) <= 1 + 1e-3
        assert torch.equal(g[..., 8:], e[..., 8:])  # the channels past rotary_dim pass through


@pytest.mark.parametrize("backend", ["auto", "eager"])
def test_in_place_rotates_the_given_tensors_and_returns_them(backend):
    q, k = _qk((1, 2, 6, 8))
    cos, sin = _angles(6, 8)
    expected = _reference(q, k, cos, sin, layout="interleaved")
    pointers = (q.data_ptr(), k.data_ptr())
    got = apply_rope_qk(q, k, cos, sin, layout="interleaved", inplace=True, backend=backend)
    assert got[0] is q and got[1] is k
    assert (q.data_ptr(), k.data_ptr()) == pointers
    torch.testing.assert_close(q, expected[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(k, expected[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", ["auto", "eager"])
def test_out_of_place_leaves_q_and_k_untouched(backend):
    q, k = _qk((1, 2, 6, 8))
    before = q.clone(), k.clone()
    cos, sin = _angles(6, 8)
    apply_rope_qk(q, k, cos, sin, backend=backend)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


@pytest.mark.parametrize("backend", ["auto", "eager"])
@pytest.mark.parametrize("inplace", [False, True])
def test_strided_q_and_k_as_projections_give_them(backend, inplace):
    """q from [b, s, h, d].transpose(1, 2), and q/k as views into one fused qkv tensor, with GQA k."""
    b, s, h, kv, d = 2, 5, 4, 2, 16
    qkv = torch.randn(b, s, (h + 2 * kv) * d)
    q = qkv[..., : h * d].view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], not contiguous
    k = qkv[..., h * d : (h + kv) * d].view(b, s, kv, d).transpose(1, 2)
    cos, sin = _angles(s, d)
    expected = _reference(q, k, cos, sin, layout="half")
    v_before = qkv[..., (h + kv) * d :].clone()
    got = apply_rope_qk(q, k, cos, sin, inplace=inplace, backend=backend)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
    assert torch.equal(qkv[..., (h + kv) * d :], v_before)  # v is never written


@pytest.mark.parametrize("backend", ["auto", "eager"])
@pytest.mark.parametrize(
    ("shape", "batch"),
    [((2, 3, 5, 8), 2), ((2, 3, 5, 8), 1), ((3, 5, 8), None), ((3, 5, 8), 3), ((5, 8), None)],
)
def test_every_cos_sin_form_apply_rope_takes(backend, shape, batch):
    """cos/sin [s, r/2] or per sequence [b, s, r/2], with x [b, h, s, d], [b, s, d], [n, s, d] or [s, d]."""
    q, k = _qk(shape)
    cos, sin = _angles(5, 8, batch)
    expected = _reference(q, k, cos, sin, layout="interleaved")
    got = apply_rope_qk(q, k, cos, sin, layout="interleaved", backend=backend)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=0)


def test_cos_sin_whose_batch_enlarges_x_give_apply_ropes_result_but_not_in_place():
    q, k = _qk((5, 8))
    cos, sin = _angles(5, 8, batch=2)  # [2, 5, 4]: the result is [2, 5, 8]
    got = apply_rope_qk(q, k, cos, sin)
    assert got[0].shape == (2, 5, 8)
    torch.testing.assert_close(got[0], apply_rope(q, cos, sin, backend="reference"), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"inplace needs cos/sin that broadcast to q's shape \(5, 8\)"):
        apply_rope_qk(q, k, cos, sin, inplace=True)


def test_gradients_flow_as_through_apply_rope():
    q, k = (x.requires_grad_() for x in _qk((1, 2, 4, 8)))
    cos, sin = _angles(4, 8)
    rotated = apply_rope_qk(q, k, cos, sin)
    (rotated[0] * rotated[1]).sum().backward()
    expected_q, expected_k = (x.detach().clone().requires_grad_() for x in (q, k))
    reference = _reference(expected_q, expected_k, cos, sin)
    (reference[0] * reference[1]).sum().backward()
    torch.testing.assert_close(q.grad, expected_q.grad)
    torch.testing.assert_close(k.grad, expected_k.grad)


def test_nan_and_inf_stay_in_their_own_pair():
    q, k = _qk((1, 1, 3, 8), torch.bfloat16)
    q[0, 0, 1, 0] = float("nan")
    k[0, 0, 2, 5] = float("inf")
    cos, sin = _angles(3, 8)
    got = apply_rope_qk(q, k, cos, sin, layout="interleaved")
    expected = _reference(q, k, cos, sin, layout="interleaved")
    for g, e, x in zip(got, expected, (q, k), strict=True):
        assert torch.equal(g.isnan(), e.isnan())
        assert torch.equal(g.isinf(), e.isinf())
        finite = e.isfinite()
        exact = apply_rope(x.double(), cos.double(), sin.double(), layout="interleaved", backend="reference")
        assert _half_ulps(g[finite], exact[finite]) <= 1 + 1e-3  # the other pairs: rounded once


def test_without_a_compiler_the_eager_path_answers(monkeypatch):
    monkeypatch.delenv("POSENC_NATIVE", raising=False)
    monkeypatch.setattr(rope_cpu, "_state", {})
    monkeypatch.setattr(rope_cpu, "_compiler", lambda: None)
    assert not native_available()
    assert "no C compiler" in rope_cpu.native_status()
    q, k = _qk((1, 2, 4, 8))
    cos, sin = _angles(4, 8)
    got = apply_rope_qk(q, k, cos, sin)
    torch.testing.assert_close(got[0], apply_rope(q, cos, sin, backend="reference"), atol=1e-6, rtol=0)
    with pytest.raises(RuntimeError, match="no C compiler"):
        apply_rope_qk(q, k, cos, sin, backend="native")


def test_native_backend_refuses_what_the_kernel_does_not_cover():
    q, k = _qk((1, 2, 4, 8), torch.float16)
    cos, sin = _angles(4, 8)
    with pytest.raises(RuntimeError, match=r"does not apply to x torch\.float16"):
        apply_rope_qk(q, k, cos, sin, backend="native")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "cuda"}, "backend must be one of 'auto', 'native', 'eager'; got 'cuda'"),
        ({"layout": "pairs"}, "layout must be one of 'half', 'interleaved'; got 'pairs'"),
        ({"rotary_dim": 6}, "cos and sin must hold rotary_dim/2 = 3 frequencies, got 4"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    q, k = _qk((1, 2, 4, 8))
    cos, sin = _angles(4, 8)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        apply_rope_qk(q, k, cos, sin, **kwargs)


def test_a_bad_k_fails_before_q_is_rotated_in_place():
    q, _ = _qk((1, 2, 4, 8))
    k = torch.randn(1, 2, 5, 8)  # s = 5, cos/sin have 4 positions
    before = q.clone()
    cos, sin = _angles(4, 8)
    with pytest.raises(ValueError, match="s = 5"):
        apply_rope_qk(q, k, cos, sin, inplace=True)
    assert torch.equal(q, before)


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_split_over_threads_give_the_same_result(layout):
    q, k = _qk((2, 8, 64, 64))  # above the size where the kernel goes parallel
    cos, sin = _angles(64, 64)
    got = apply_rope_qk(q, k, cos, sin, layout=layout, backend="native")
    for g, e in zip(got, _reference(q, k, cos, sin, layout=layout), strict=True):
        assert torch.equal(g, e)


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (3, 5, 8)])
def test_an_expanded_k_is_read_correctly_and_refused_in_place(shape):
    q, _ = _qk(shape)
    k = torch.randn(1, *shape[1:]).expand(shape)  # one head's memory shared by every index
    cos, sin = _angles(5, 8)
    got = apply_rope_qk(q, k, cos, sin)
    torch.testing.assert_close(got[1], apply_rope(k, cos, sin), atol=1e-6, rtol=0)
    before = q.clone()
    with pytest.raises(ValueError, match="inplace needs k to own its memory, got an expanded view"):
        apply_rope_qk(q, k, cos, sin, inplace=True)
    assert torch.equal(q, before)
