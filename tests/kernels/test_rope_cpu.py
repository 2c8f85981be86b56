"""RoPE's native backend (the C kernel on CPU) returns what the reference returns, forward and backward."""

from __future__ import annotations

import pytest
import torch

from posenc.functional import rope as functional_rope
from posenc.functional.rope import apply_rope, apply_rope_qk, rope_cos_sin, rope_inv_freq
from posenc.kernels import rope_cpu
from posenc.kernels.rope_cpu import native_available

LAYOUTS = ("half", "interleaved")
needs_native = pytest.mark.skipif(not native_available(), reason="the C kernel does not build here")


@pytest.fixture
def without_c_kernel(monkeypatch):
    """The native backend as it runs where no C compiler works: its torch fallback."""
    monkeypatch.setattr(rope_cpu, "_state", {"lib": None, "reason": "disabled for this test"})


@pytest.fixture(autouse=True)
def _global_rng_untouched():
    """opcheck draws from the global generator: leave it as found for the tests after these."""
    with torch.random.fork_rng():
        yield


def _qk(shape, dtype=torch.float32, seed=0, k_heads=None):
    generator = torch.Generator().manual_seed(seed)
    k_shape = shape if k_heads is None else (shape[0], k_heads, *shape[2:])
    q = torch.randn(shape, generator=generator).to(dtype)
    return q, torch.randn(k_shape, generator=generator).to(dtype)


def _angles(length, rotary_dim, batch=None, dtype=torch.float32):
    inv_freq, _ = rope_inv_freq(rotary_dim)
    positions = torch.arange(length) if batch is None else torch.arange(batch * length).view(batch, length)
    return rope_cos_sin(positions * 37, inv_freq, dtype=dtype)  # [(b,) s, r/2]; large angles


def _half_ulps(got: torch.Tensor, exact: torch.Tensor) -> float:
    """max |got − exact| in halves of got's dtype unit at each exact value: ≤ 1 is one correct rounding."""
    info = torch.finfo(got.dtype)
    ulp = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(info.tiny)))) * info.eps
    return float(((got.double() - exact).abs() / (ulp / 2)).max())


def _reference(q, k, cos, sin, **kwargs):
    return apply_rope(q, cos, sin, backend="eager", **kwargs), apply_rope(
        k, cos, sin, backend="eager", **kwargs
    )


# --- forward ----------------------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [None, 100])
@pytest.mark.parametrize("inplace", [False, True])
def test_c_kernel_is_bit_identical_to_the_reference_in_float32_and_float64(
    dtype, layout, rotary_dim, inplace
):
    q, k = _qk((2, 3, 45, 128), dtype)  # 45 positions: whole and partial blocks of rows
    cos, sin = _angles(45, rotary_dim or 128)
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
@pytest.mark.parametrize("width", [32, 40, 128, 230])  # each SIMD width of the kernel, and their tails
def test_c_kernel_rounds_bfloat16_once_from_the_float32_result(layout, inplace, width):
    q, k = _qk((2, 4, 19, width), torch.bfloat16)
    cos, sin = _angles(19, width)
    inputs = [x.clone() for x in (q, k)]
    once = [
        apply_rope(x.float(), cos, sin, layout=layout, backend="eager").to(torch.bfloat16) for x in inputs
    ]
    products = _reference(q, k, cos, sin, layout=layout)  # bf16 products, as the models do
    exact = [
        apply_rope(x.double(), cos.double(), sin.double(), layout=layout, backend="eager") for x in inputs
    ]
    got = apply_rope_qk(q, k, cos, sin, layout=layout, inplace=inplace, backend="native")
    for g, o, p, e, x in zip(got, once, products, exact, inputs, strict=True):
        assert torch.equal(g, o)
        assert (g.double() - p.double()).abs().max() <= 2**-7 * x.abs().max()  # a bf16 unit of |x|
        assert (g.double() - e).abs().max() <= (p.double() - e).abs().max()  # and closer to exact


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("projected", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 64])
def test_streamed_outputs_in_either_row_order_are_the_reference_rotation(
    dtype, layout, projected, rotary_dim, monkeypatch
):
    """Outputs written with non-temporal stores (any size here), for [b, h, s, d] and for the [b, s, h, d]
    projection viewed as [b, h, s, d] (rows visited heads first), equal the rotation rounded once."""
    monkeypatch.setattr(rope_cpu, "_STREAM_MIN_BYTES", 0)
    generator = torch.Generator().manual_seed(3)
    shape = (2, 37, 4, 128) if projected else (2, 4, 37, 128)
    q, k = (torch.randn(shape, generator=generator).to(dtype) for _ in range(2))
    if projected:
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [b, h, s, d], heads 128 elements apart
    cos, sin = _angles(37, rotary_dim or 128)
    got = apply_rope_qk(q, k, cos, sin, layout=layout, rotary_dim=rotary_dim, backend="native")
    for g, x in zip(got, (q, k), strict=True):
        expected = apply_rope(x.float(), cos, sin, layout=layout, rotary_dim=rotary_dim, backend="eager")
        assert g.stride() == x.stride()
        assert torch.equal(g, expected.to(dtype))


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
def test_results_below_float32s_normal_range_round_as_torch_rounds_them(layout):
    """AVX512-BF16's conversion flushes float32 denormals to zero; torch rounds them to bfloat16's."""
    q, k = _qk((1, 2, 3, 64))
    q, k = (q * 1e-39).to(torch.bfloat16), (k * 3e-38).to(torch.bfloat16)  # denormal and near-denormal
    cos, sin = _angles(3, 64)
    got = apply_rope_qk(q, k, cos, sin, layout=layout, backend="native")
    for g, x in zip(got, (q, k), strict=True):
        expected = apply_rope(x.float(), cos, sin, layout=layout, backend="eager").to(torch.bfloat16)
        assert torch.equal(g, expected)
        assert bool((g != 0).any())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("inplace", [False, True])
def test_torch_fallback_agrees_with_the_reference(without_c_kernel, dtype, layout, inplace):
    q, k = _qk((2, 3, 5, 12), dtype)
    cos, sin = _angles(5, 8)
    expected = _reference(q, k, cos, sin, layout=layout, rotary_dim=8)
    exact = [
        apply_rope(x.double(), cos.double(), sin.double(), layout=layout, rotary_dim=8, backend="eager")
        for x in (q, k)
    ]
    got = apply_rope_qk(q, k, cos, sin, layout=layout, rotary_dim=8, inplace=inplace, backend="native")
    for g, e, x in zip(got, expected, exact, strict=True):
        assert g.dtype == dtype
        if dtype == torch.float32:
            torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
        else:  # the documented numerics: the float32 rotation rounded once, so within half a unit of exact
            # (the float32 rotation's own error, ~1e-7 relative, can add a hair at a tie)
            assert _half_ulps(g, x) <= 1 + 1e-3
        assert torch.equal(g[..., 8:], e[..., 8:])  # the channels past rotary_dim pass through


def test_float16_takes_the_torch_fallback_of_the_native_backend():
    q, k = _qk((1, 2, 4, 8), torch.float16)
    cos, sin = _angles(4, 8)
    got = apply_rope_qk(q, k, cos, sin, backend="native")
    once = apply_rope(q.float(), cos, sin, backend="eager").to(torch.float16)
    torch.testing.assert_close(got[0], once, atol=0, rtol=2**-10)


@pytest.mark.parametrize("fallback", [False, True])
def test_in_place_rotates_the_given_tensors_and_returns_them(fallback, monkeypatch):
    if fallback:
        monkeypatch.setattr(rope_cpu, "_state", {"lib": None, "reason": "disabled for this test"})
    q, k = _qk((1, 2, 6, 8))
    cos, sin = _angles(6, 8)
    expected = _reference(q, k, cos, sin, layout="interleaved")
    pointers = (q.data_ptr(), k.data_ptr())
    got = apply_rope_qk(q, k, cos, sin, layout="interleaved", inplace=True, backend="native")
    assert got[0] is q and got[1] is k
    assert (q.data_ptr(), k.data_ptr()) == pointers
    torch.testing.assert_close(q, expected[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(k, expected[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", ["auto", "native", "eager"])
def test_out_of_place_leaves_q_and_k_untouched(backend):
    q, k = _qk((1, 2, 6, 8))
    before = q.clone(), k.clone()
    cos, sin = _angles(6, 8)
    apply_rope_qk(q, k, cos, sin, backend=backend)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_strided_q_and_k_as_projections_give_them(fallback, inplace, monkeypatch):
    """q from [b, s, h, d].transpose(1, 2), and q/k as views into one fused qkv tensor, with GQA k."""
    if fallback:
        monkeypatch.setattr(rope_cpu, "_state", {"lib": None, "reason": "disabled for this test"})
    b, s, h, kv, d = 2, 5, 4, 2, 16
    qkv = torch.randn(b, s, (h + 2 * kv) * d)
    q = qkv[..., : h * d].view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], not contiguous
    k = qkv[..., h * d : (h + kv) * d].view(b, s, kv, d).transpose(1, 2)
    cos, sin = _angles(s, d)
    expected = _reference(q, k, cos, sin, layout="half")
    v_before = qkv[..., (h + kv) * d :].clone()
    got = apply_rope_qk(q, k, cos, sin, inplace=inplace, backend="native")
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=0)
    assert torch.equal(qkv[..., (h + kv) * d :], v_before)  # v is never written


@pytest.mark.parametrize("backend", ["auto", "native"])
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


def test_cos_sin_whose_batch_enlarges_x_take_the_reference_and_are_refused_by_the_kernel():
    q, k = _qk((5, 8))
    cos, sin = _angles(5, 8, batch=2)  # [2, 5, 4]: the result is [2, 5, 8]
    got = apply_rope_qk(q, k, cos, sin)
    assert got[0].shape == (2, 5, 8)
    torch.testing.assert_close(got[0], apply_rope(q, cos, sin, backend="eager"), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"inplace needs cos/sin that broadcast to q's shape \(5, 8\)"):
        apply_rope_qk(q, k, cos, sin, inplace=True)
    with pytest.raises(ValueError, match=r"would enlarge q of shape \(5, 8\); the native kernel does not"):
        apply_rope_qk(q, k, cos, sin, backend="native")


def test_nan_and_inf_stay_in_their_own_pair():
    q, k = _qk((1, 1, 3, 40), torch.bfloat16)
    q[0, 0, 1, 0] = float("nan")
    k[0, 0, 2, 5] = float("inf")
    cos, sin = _angles(3, 40)
    got = apply_rope_qk(q, k, cos, sin, layout="interleaved", backend="native")
    expected = _reference(q, k, cos, sin, layout="interleaved")
    for g, e, x in zip(got, expected, (q, k), strict=True):
        assert torch.equal(g.isnan(), e.isnan())
        assert torch.equal(g.isinf(), e.isinf())
        finite = e.isfinite()
        exact = apply_rope(x.double(), cos.double(), sin.double(), layout="interleaved", backend="eager")
        assert _half_ulps(g[finite], exact[finite]) <= 1 + 1e-3  # the other pairs: rounded once


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
    got = apply_rope_qk(q, k, cos, sin, backend="native")
    torch.testing.assert_close(got[1], apply_rope(k, cos, sin, backend="eager"), atol=1e-6, rtol=0)
    before = q.clone()
    with pytest.raises(ValueError, match="inplace needs k to own its memory, got an expanded view"):
        apply_rope_qk(q, k, cos, sin, inplace=True)
    assert torch.equal(q, before)


def test_a_bad_k_fails_before_q_is_rotated_in_place():
    q, _ = _qk((1, 2, 4, 8))
    k = torch.randn(1, 2, 5, 8)  # s = 5, cos/sin have 4 positions
    before = q.clone()
    cos, sin = _angles(4, 8)
    with pytest.raises(ValueError, match="s = 5"):
        apply_rope_qk(q, k, cos, sin, inplace=True, backend="native")
    assert torch.equal(q, before)


def test_heads_of_different_widths_each_get_their_own_rotation():
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 1, 4, 12)
    (q_cos, q_sin), (k_cos, k_sin) = _angles(4, 8), _angles(4, 12)
    got = apply_rope_qk(q, k, q_cos, q_sin, k_cos=k_cos, k_sin=k_sin, backend="native")
    assert torch.equal(got[0], apply_rope(q, q_cos, q_sin, backend="eager"))
    assert torch.equal(got[1], apply_rope(k, k_cos, k_sin, backend="eager"))


# --- backward ---------------------------------------------------------------------------------------

POSITIONS = {"[s]": None, "[b, s]": 2}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rotary_dim", [None, 10])
@pytest.mark.parametrize("positions", list(POSITIONS))
@pytest.mark.parametrize("inplace", [False, True])
def test_gradients_match_float64_with_gqa(layout, dtype, rotary_dim, positions, inplace):
    """q with 4 heads, k with 2 and its own angles; the backward kernel rotates the gradients back."""
    q, k = _qk((2, 4, 19, 16), dtype, k_heads=2)
    q_cos, q_sin = _angles(19, rotary_dim or 16, POSITIONS[positions])
    k_cos, k_sin = (t * 0.5 for t in _angles(19, rotary_dim or 16, POSITIONS[positions]))  # xPos-like
    grads = _qk((2, 4, 19, 16), dtype, seed=1, k_heads=2)
    leaves = [x.clone().requires_grad_() for x in (q, k)]
    inputs = [x * 1 for x in leaves] if inplace else leaves  # in place needs non-leaf tensors
    got = apply_rope_qk(
        *inputs, q_cos, q_sin, k_cos=k_cos, k_sin=k_sin, layout=layout, rotary_dim=rotary_dim, inplace=inplace
    )
    assert type(got[0].grad_fn).__name__ == ("CopyBackwards" if inplace else "_RotationBackward")
    torch.autograd.backward(got, grads)
    for leaf, x, grad, cos, sin in zip(leaves, (q, k), grads, (q_cos, k_cos), (q_sin, k_sin), strict=True):
        exact_leaf = x.double().requires_grad_()
        exact = apply_rope(
            exact_leaf, cos.double(), sin.double(), layout=layout, rotary_dim=rotary_dim, backend="eager"
        )
        exact.backward(grad.double())
        bound = {torch.float32: 1e-6, torch.bfloat16: 2**-8}[dtype]  # one rounding of the dtype
        torch.testing.assert_close(leaf.grad.double(), exact_leaf.grad, atol=1e-6, rtol=bound)


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
def test_float32_gradients_are_bit_identical_to_the_reference_autograd(layout):
    q, k = _qk((2, 3, 21, 24))
    cos, sin = _angles(21, 20)
    grads = _qk((2, 3, 21, 24), seed=1)
    native = [x.clone().requires_grad_() for x in (q, k)]
    eager = [x.clone().requires_grad_() for x in (q, k)]
    torch.autograd.backward(apply_rope_qk(*native, cos, sin, layout=layout, rotary_dim=20), grads)
    torch.autograd.backward(
        apply_rope_qk(*eager, cos, sin, layout=layout, rotary_dim=20, backend="eager"), grads
    )
    for n, e in zip(native, eager, strict=True):
        assert torch.equal(n.grad, e.grad)


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_gradients_arrive_in_the_layout_of_q_and_k_as_the_projection_gives_them(fallback, fused, monkeypatch):
    """q and k viewed from a [b, s, h·d] projection (or a fused qkv one) with a contiguous gradient from
    attention: the rotation's backward writes each gradient in its input's layout, so that the views'
    backward passes it on without a copy, and the projection's gradient is the float64 one."""
    if fallback:
        monkeypatch.setattr(rope_cpu, "_state", {"lib": None, "reason": "disabled for this test"})
    b, s, h, d = 2, 7, 3, 16
    width = 3 * h * d if fused else h * d
    projection = torch.randn(b, s, width, dtype=torch.float64).float().requires_grad_()
    q = projection[..., : h * d].view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], strided
    k = (projection[..., h * d : 2 * h * d] if fused else projection).view(b, s, h, d).transpose(1, 2)
    arrived = {}
    q.register_hook(lambda grad: arrived.__setitem__("q", grad.stride()))
    k.register_hook(lambda grad: arrived.__setitem__("k", grad.stride()))
    cos, sin = _angles(s, d)
    grads = _qk((b, h, s, d), seed=1)  # contiguous, as attention's backward gives them
    torch.autograd.backward(apply_rope_qk(q, k, cos, sin, backend="native"), grads)
    dense = torch.empty_like(q).stride()  # q's own strides, or dense ones in their order (fused)
    assert arrived == {"q": dense, "k": dense}
    expected = torch.zeros(b, s, width, dtype=torch.float64)
    for grad, start in ((grads[0], 0), (grads[1], h * d if fused else 0)):
        exact = apply_rope(grad.double(), cos.double(), -sin.double(), backend="eager")  # R(−θ)·grad
        expected[..., start : start + h * d] += exact.transpose(1, 2).reshape(b, s, h * d)
    torch.testing.assert_close(projection.grad.double(), expected, atol=1e-6, rtol=1e-6)


def test_double_backward_rotates_forward_again():
    (x,) = _qk((1, 2, 5, 8))[:1]
    x.requires_grad_()
    cos, sin = _angles(5, 8)
    (grad,) = torch.autograd.grad(apply_rope(x, cos, sin).square().sum(), x, create_graph=True)
    torch.testing.assert_close(grad, 2 * x.detach(), atol=1e-5, rtol=1e-6)  # R(−θ)·2R(θ)x = 2x
    (second,) = torch.autograd.grad(grad.sum(), x)
    torch.testing.assert_close(second, torch.full_like(x, 2.0), atol=1e-5, rtol=0)


def test_cos_sin_that_need_a_gradient_take_the_reference_or_are_refused_by_the_kernel():
    q, k = _qk((1, 2, 4, 8))
    cos, sin = (t.clone().requires_grad_() for t in _angles(4, 8))
    got = apply_rope_qk(q, k, cos, sin)  # auto: the reference, which differentiates cos/sin
    sum(g.sum() for g in got).backward()
    assert cos.grad is not None and sin.grad is not None
    with pytest.raises(ValueError, match="the native kernel does not differentiate cos; use backend='eager'"):
        apply_rope_qk(q, k, cos, sin, backend="native")


def test_gradients_flow_through_the_torch_fallback(without_c_kernel):
    q, k = (x.requires_grad_() for x in _qk((1, 2, 4, 8), torch.bfloat16))
    cos, sin = _angles(4, 8)
    rotated = apply_rope_qk(q, k, cos, sin, backend="native")
    (rotated[0].float() * rotated[1].float()).sum().backward()
    expected = [x.detach().float().requires_grad_() for x in (q, k)]
    reference = _reference(*expected, cos, sin)
    (reference[0] * reference[1]).sum().backward()
    torch.testing.assert_close(q.grad.float(), expected[0].grad, atol=0.05, rtol=2**-7)
    torch.testing.assert_close(k.grad.float(), expected[1].grad, atol=0.05, rtol=2**-7)


# --- torch.compile and the custom ops ----------------------------------------------------------------


def _attention_logits(q, k, cos, sin, layout):
    q, k = apply_rope_qk(q, k, cos, sin, layout=layout, rotary_dim=6)
    return q @ k.transpose(-1, -2)  # [b, h, s, s]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_torch_compile_traces_the_native_op_in_one_graph_forward_and_backward(layout, dtype):
    """fullgraph=True: no graph break; the op is in the graph (aot_eager: no C++ compiler needed)."""
    from functorch.compile import make_boxed_func

    graphs = []

    def aot_recording(gm, example_inputs):
        graphs.append(str(gm.graph))
        aot = torch._dynamo.backends.common.aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))
        return aot(gm, example_inputs)

    q, k = (x.requires_grad_() for x in _qk((1, 2, 5, 8), dtype, k_heads=1))
    cos, sin = _angles(5, 6)
    torch._dynamo.reset()
    compiled = torch.compile(_attention_logits, fullgraph=True, backend=aot_recording)
    got = compiled(q, k, cos, sin, layout)
    assert len(graphs) == 1 and "torch.ops.posenc.rope_qk_native" in graphs[0]
    expected = _attention_logits(q, k, cos, sin, layout)
    torch.testing.assert_close(got, expected)
    got.float().sum().backward()
    grads = q.grad.clone(), k.grad.clone()
    q.grad = k.grad = None
    expected.float().sum().backward()
    torch.testing.assert_close(grads[0], q.grad)
    torch.testing.assert_close(grads[1], k.grad)


def test_torch_compile_of_in_place_rotation_mutates_the_inputs():
    def rotate(q, k, cos, sin):
        return apply_rope_qk(q, k, cos, sin, inplace=True)

    q, k = _qk((1, 2, 5, 8))
    cos, sin = _angles(5, 8)
    expected = _reference(q, k, cos, sin)
    torch._dynamo.reset()
    torch.compile(rotate, fullgraph=True, backend="aot_eager")(q, k, cos, sin)
    torch.testing.assert_close(q, expected[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(k, expected[1], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_torch_compile_with_inductor_forward_and_backward():
    """The default backend (it builds C++ for the rest of the graph: several seconds)."""

    def attention(q, k, cos, sin):
        q, k = apply_rope_qk(q, k, cos, sin)
        return (q @ k.transpose(-1, -2)).softmax(dim=-1)  # [b, h, s, s]

    q, k = (x.requires_grad_() for x in _qk((1, 2, 4, 8)))
    cos, sin = _angles(4, 8)
    torch._dynamo.reset()
    got = torch.compile(attention, fullgraph=True)(q, k, cos, sin)
    torch.testing.assert_close(got, attention(q, k, cos, sin))
    got.sum().backward()
    assert q.grad is not None and k.grad is not None


def test_native_custom_ops_are_registered_with_their_schemas():
    schema = str(torch.ops.posenc.rope_qk_native.default._schema)
    assert schema.startswith("posenc::rope_qk_native(Tensor q, Tensor k, Tensor q_cos, Tensor q_sin")
    assert schema.endswith("-> (Tensor, Tensor)")
    inplace = str(torch.ops.posenc.rope_native_inplace.default._schema)
    assert "Tensor(a0!) x" in inplace and inplace.endswith("-> ()")


@pytest.mark.parametrize(
    "op", ["rope_native", "rope_qk_native", "rope_native_inplace", "rope_qk_native_inplace"]
)
def test_opcheck_passes_for_every_native_op(op):
    """Schema, fake (meta) kernel, autograd registration and AOT dispatch with dynamic shapes."""
    q, k = _qk((1, 2, 3, 8), k_heads=1)
    cos, sin = _angles(3, 6)
    if not op.endswith("inplace"):
        q.requires_grad_()
        k.requires_grad_()
    args = {
        "rope_native": (q, cos, sin, "interleaved", 6, False),
        "rope_qk_native": (q, k, cos, sin, cos, sin, "half", 6, True),
        "rope_native_inplace": (q, cos, sin, "half", 6),
        "rope_qk_native_inplace": (q, k, cos, sin, cos, sin, "interleaved", 6),
    }[op]
    torch.library.opcheck(getattr(torch.ops.posenc, op).default, args)


def test_fake_tensors_take_the_ops_fake_implementation():
    """Under FakeTensorMode (as in torch.export) nothing reads tensor memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(2, 4, 6, 16, dtype=torch.bfloat16), torch.empty(2, 2, 6, 16, dtype=torch.bfloat16)
        cos, sin = torch.empty(6, 8), torch.empty(6, 8)
        assert functional_rope._path("auto", [("q", q, cos, sin), ("k", k, cos, sin)], [16, 16]) == "native"
        q_rot, k_rot = apply_rope_qk(q, k, cos, sin)
        assert q_rot.shape == q.shape and k_rot.dtype == torch.bfloat16


# --- building the kernel ------------------------------------------------------------------------------


def test_the_c_source_is_read_from_its_own_file_beside_the_module():
    from pathlib import Path

    path = Path(rope_cpu.__file__).with_name("rope_cpu.c")
    assert rope_cpu.source() == path.read_text(encoding="utf-8")
    assert "KERNEL(half_bf16_f32, row_half_bf16, uint16_t, float, float)" in rope_cpu.source()


def test_without_a_compiler_the_torch_fallback_answers(monkeypatch):
    monkeypatch.delenv("POSENC_NATIVE", raising=False)
    monkeypatch.setattr(rope_cpu, "_state", {})
    monkeypatch.setattr(rope_cpu, "_compiler", lambda: None)
    assert not native_available()
    assert "no C compiler" in rope_cpu.native_status()
    q, k = _qk((1, 2, 4, 8))
    cos, sin = _angles(4, 8)
    for backend in ("auto", "native"):
        got = apply_rope_qk(q, k, cos, sin, backend=backend)
        torch.testing.assert_close(got[0], apply_rope(q, cos, sin, backend="eager"), atol=1e-6, rtol=0)


def test_a_build_that_fails_its_self_test_is_not_used(monkeypatch):
    monkeypatch.delenv("POSENC_NATIVE", raising=False)
    monkeypatch.setattr(rope_cpu, "_state", {})
    monkeypatch.setattr(rope_cpu, "_self_test", lambda lib: "self-test failed for torch.bfloat16")
    if rope_cpu._compiler() is None:
        pytest.skip("no C compiler here")
    assert not native_available()
    assert "self-test failed for torch.bfloat16" in rope_cpu.native_status()


def test_the_c_source_ships_as_package_data():
    """An installed posenc (not a checkout) must hold rope_cpu.c, or the kernel never builds there."""
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    package_data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "*.c" in package_data["posenc.kernels"]


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
def test_float64_tables_are_read_as_they_are_and_rounded_once_as_the_reference_rounds_them(layout):
    """RotaryEncoding caches float64 cos/sin: the kernel reads them without a cast of its own first."""
    q, k = _qk((1, 3, 40, 64))
    cos, sin = _angles(40, 64, dtype=torch.float64)
    got = apply_rope_qk(q, k, cos, sin, layout=layout, backend="native")
    for g, e in zip(got, _reference(q, k, cos, sin, layout=layout), strict=True):
        assert torch.equal(g, e)  # the reference casts the tables to float32 first
    q16, k16 = q.to(torch.bfloat16), k.to(torch.bfloat16)
    got = apply_rope_qk(q16, k16, cos, sin, layout=layout, backend="native")
    for g, x in zip(got, (q16, k16), strict=True):
        once = apply_rope(x.float(), cos.float(), sin.float(), layout=layout, backend="eager")
        assert torch.equal(g, once.to(torch.bfloat16))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_func_transforms_take_the_reference(layout):
    """The kernels' ops do not support vmap or torch.func.grad: auto takes the reference there."""
    (x,) = _qk((2, 3, 5, 8))[:1]
    cos, sin = _angles(5, 8)
    grad = torch.func.grad(lambda t: apply_rope(t, cos, sin, layout=layout).square().sum())(x)
    torch.testing.assert_close(grad, 2 * x, atol=1e-5, rtol=1e-6)  # R(−θ)·2R(θ)x
    batched = torch.vmap(lambda t: apply_rope(t, cos, sin, layout=layout))(x)
    assert torch.equal(batched, apply_rope(x, cos, sin, layout=layout, backend="eager"))
    with pytest.raises(ValueError, match="the native kernel does not run under torch.func transforms"):
        torch.vmap(lambda t: apply_rope(t, cos, sin, backend="native"))(x)


def test_eager_autograd_calls_the_kernel_forward_and_backward(monkeypatch):
    calls = []
    original = rope_cpu._launch
    monkeypatch.setattr(rope_cpu, "_launch", lambda items, *a: calls.append(a[-1]) or original(items, *a))
    q, k = (x.requires_grad_() for x in _qk((1, 2, 4, 8)))
    cos, sin = _angles(4, 8)
    sum(r.sum() for r in apply_rope_qk(q, k, cos, sin)).backward()
    assert calls == [False, True]  # conjugate: the backward rotates by −θ


@pytest.mark.parametrize("backend", ["auto", "native", "eager"])
def test_inplace_refuses_one_tensor_given_as_both_q_and_k(backend):
    # the kernels turned it twice (2.39 from one rotation), with no error
    inv_freq, _ = rope_inv_freq(8)
    cos, sin = rope_cos_sin(torch.arange(4) + 1, inv_freq)
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="inplace needs q and k not to share memory"):
        apply_rope_qk(x, x, cos, sin, inplace=True, backend=backend)
    fused = torch.randn(1, 4, 2, 8)  # q and k side by side, as a fused projection gives them
    q, k = fused[:, :, 0].unsqueeze(1), fused[:, :, 1].unsqueeze(1)  # [1, 1, 4, 8], separate elements
    expected = [apply_rope(t, cos, sin, backend="eager") for t in (q, k)]
    got = apply_rope_qk(q, k, cos, sin, inplace=True, backend=backend)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
