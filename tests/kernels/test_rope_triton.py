"""The Triton RoPE kernels return what the float64 reference returns, forward and backward.

Without a GPU the kernels run on CPU tensors in Triton's interpreter: every test here that launches
them sets ``TRITON_INTERPRET=1`` for its own duration (the ``interpret`` fixture). posenc reads the
variable at each launch and builds the kernel once per mode, so the order in which modules were
imported does not matter, and CUDA tests in the same process still run the compiled kernel. Tests
that need the triton package skip without it; tests that need a GPU skip without one.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from posenc.functional import rope as functional_rope
from posenc.functional.rope import apply_rope, apply_rope_qk, rope_cos_sin, rope_inv_freq
from posenc.kernels import rope_triton
from posenc.kernels.rope_triton import MAX_D_HEAD, apply_rope_qk_triton, apply_rope_triton
from tests.reference.rope_loop import rope_vector

LAYOUTS = ("half", "interleaved")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
needs_triton = pytest.mark.skipif(
    not rope_triton.TRITON_INSTALLED,
    reason="triton is not installed (pip install triton; it is in the dev extra)",
)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
#: |kernel − float64| ≤ atol + rtol·|float64|: one rounding of the dtype plus float32 arithmetic.
TOLERANCE = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-6},
    torch.bfloat16: {"atol": 1e-5, "rtol": 2**-8},
    torch.float16: {"atol": 1e-5, "rtol": 2**-11},
}


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _global_rng_untouched():
    """Leave torch's global generator as found (opcheck and autograd draw from it), so the tests
    that come after see the same random numbers whether or not these ran."""
    with torch.random.fork_rng():
        yield


def _tensors(shape, dtype=torch.float32, seed=0, count=1):
    generator = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(shape, generator=generator) * 2).to(dtype) for _ in range(count))


def _angles(positions, rotary_dim, dtype=torch.float32):
    inv_freq, _ = rope_inv_freq(rotary_dim)
    return rope_cos_sin(positions, inv_freq, dtype=dtype)  # [(b,) s, r/2]


def _exact(x, positions, layout, rotary_dim=None):
    """x rotated in float64 from exact float64 angles, by the functional reference path."""
    cos, sin = _angles(positions, rotary_dim or x.shape[-1], torch.float64)
    return apply_rope(x.double(), cos, sin, layout=layout, rotary_dim=rotary_dim, backend="eager")


def _assert_close_to_exact(got, exact, dtype):
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), exact, **TOLERANCE[dtype])


POSITIONS = {
    "[s]": torch.arange(6) * 911,  # large angles
    "[b, s]": torch.tensor([[0, 1, 2, 0, 1, 2], [5, 6, 7, 8, 9, 10]]),  # packed rows, a KV-cache offset
}


@needs_triton
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rotary_dim", [None, 10])
@pytest.mark.parametrize("positions", list(POSITIONS))
def test_q_and_k_in_one_launch_match_float64_with_gqa(interpret, layout, dtype, rotary_dim, positions):
    """q with 4 heads, k with 2 (GQA); partial rotary; positions [s] or per sequence [b, s]."""
    q, k = _tensors((2, 4, 6, 16), dtype), _tensors((2, 2, 6, 16), dtype, seed=1)
    q, k = q[0], k[0]
    position = POSITIONS[positions]
    cos, sin = _angles(position, rotary_dim or 16)
    got = apply_rope_qk_triton(q, k, cos, sin, layout=layout, rotary_dim=rotary_dim)
    for g, x in zip(got, (q, k), strict=True):
        exact = _exact(x, position, layout, rotary_dim)
        _assert_close_to_exact(g, exact, dtype)
        if rotary_dim:
            assert torch.equal(g[..., rotary_dim:], x[..., rotary_dim:])  # passed through, untouched


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_result_is_the_float32_rotation_rounded_once(interpret, dtype, layout):
    (x,) = _tensors((1, 3, 5, 24), dtype)
    cos, sin = _angles(torch.arange(5) * 101, 20)
    once = apply_rope(x.float(), cos, sin, layout=layout, rotary_dim=20, backend="eager").to(dtype)
    assert torch.equal(apply_rope_triton(x, cos, sin, layout=layout, rotary_dim=20), once)


@needs_triton
def test_matches_the_float64_loop_of_the_formula(interpret):
    (x,) = _tensors((1, 1, 4, 12))
    positions = [0, 3, 70, 12345]
    cos, sin = _angles(torch.tensor(positions), 8)
    for layout in LAYOUTS:
        got = apply_rope_triton(x, cos, sin, layout=layout, rotary_dim=8)
        for row, position in enumerate(positions):
            loop = rope_vector(x[0, 0, row].double().tolist(), position, layout=layout, rotary_dim=8)
            torch.testing.assert_close(
                got[0, 0, row].double(), torch.tensor(loop, dtype=torch.float64), atol=2e-5, rtol=0
            )


@needs_triton
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("positions", list(POSITIONS))
def test_gradients_match_float64(interpret, layout, dtype, positions):
    """The backward kernel rotates the incoming gradient by −θ: checked against float64 autograd."""
    q, k = (
        t.requires_grad_()
        for t in _tensors((2, 4, 6, 16), dtype, count=1) + _tensors((2, 2, 6, 16), dtype, 1)
    )
    grad_q, grad_k = _tensors((2, 4, 6, 16), dtype, seed=2) + _tensors((2, 2, 6, 16), dtype, seed=3)
    position = POSITIONS[positions]
    cos, sin = _angles(position, 10)
    q_rot, k_rot = apply_rope_qk_triton(q, k, cos, sin, layout=layout, rotary_dim=10)
    torch.autograd.backward((q_rot, k_rot), (grad_q, grad_k))
    for x, grad in ((q, grad_q), (k, grad_k)):
        leaf = x.detach().double().requires_grad_()
        _exact(leaf, position, layout, 10).backward(grad.double())
        _assert_close_to_exact(x.grad, leaf.grad, dtype)


@needs_triton
def test_single_tensor_gradient_and_double_backward(interpret):
    (x,) = _tensors((1, 2, 5, 8))
    x.requires_grad_()
    cos, sin = _angles(torch.arange(5), 8)
    (grad,) = torch.autograd.grad(apply_rope_triton(x, cos, sin).square().sum(), x, create_graph=True)
    leaf = x.detach().double().requires_grad_()
    (expected,) = torch.autograd.grad(
        _exact(leaf, torch.arange(5), "half").square().sum(), leaf, create_graph=True
    )
    torch.testing.assert_close(grad.double(), expected, atol=1e-5, rtol=1e-6)
    (second,) = torch.autograd.grad(grad.sum(), x)  # d/dx Σ 2·R(−θ)R(θ)x = 2
    torch.testing.assert_close(second, torch.full_like(x, 2.0), atol=1e-5, rtol=0)


@needs_triton
@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_rotates_the_given_memory_and_returns_it(interpret, layout):
    q, k = _tensors((2, 4, 6, 16), count=2)
    k = k[:, :2]  # [2, 2, 6, 16]: a GQA k, a view
    expected = apply_rope_qk_triton(q, k, *_angles(torch.arange(6), 12), layout=layout, rotary_dim=12)
    pointers = q.data_ptr(), k.data_ptr()
    got = apply_rope_qk_triton(
        q, k, *_angles(torch.arange(6), 12), layout=layout, rotary_dim=12, inplace=True
    )
    assert got[0] is q and got[1] is k and (q.data_ptr(), k.data_ptr()) == pointers
    assert torch.equal(q, expected[0]) and torch.equal(k, expected[1])


@needs_triton
def test_in_place_under_autograd_rotates_out_of_place_and_copies(interpret):
    q, k = (t * 1.0 for t in _tensors((1, 2, 4, 8), count=2))  # non-leaf tensors
    leaf = torch.zeros(1, requires_grad=True)
    q, k = q + leaf, k + leaf
    cos, sin = _angles(torch.arange(4), 8)
    expected = apply_rope_qk_triton(q.detach(), k.detach(), cos, sin)
    got = apply_rope_qk_triton(q, k, cos, sin, inplace=True)
    assert got[0] is q and torch.equal(q.detach(), expected[0])
    (got[0].sum() + got[1].sum()).backward()
    assert leaf.grad is not None


@needs_triton
@pytest.mark.parametrize("inplace", [False, True])
def test_bshd_views_and_fused_qkv_are_rotated_without_a_copy(interpret, inplace):
    """q and k as [b, s, h, d] slices of one projection, viewed [b, h, s, d]; v is never written."""
    b, s, h, kv, d = 2, 5, 4, 2, 16
    (qkv,) = _tensors((b, s, (h + 2 * kv) * d))
    q = qkv[..., : h * d].view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], not contiguous
    k = qkv[..., h * d : (h + kv) * d].view(b, s, kv, d).transpose(1, 2)
    expected = [_exact(x, torch.arange(s), "interleaved") for x in (q, k)]
    v_before = qkv[..., (h + kv) * d :].clone()
    got = apply_rope_qk_triton(q, k, *_angles(torch.arange(s), d), layout="interleaved", inplace=inplace)
    for g, e in zip(got, expected, strict=True):
        _assert_close_to_exact(g, e, torch.float32)
    assert torch.equal(qkv[..., (h + kv) * d :], v_before)
    if not inplace:
        assert got[0].transpose(1, 2).is_contiguous()  # the output keeps the [b, s, h, d] memory order


@needs_triton
def test_channels_with_a_stride_are_read_and_written_by_that_stride(interpret):
    (base,) = _tensors((1, 2, 16, 5))
    x = base.transpose(-1, -2)  # [1, 2, 5, 16] with channel stride 5
    got = apply_rope_triton(x, *_angles(torch.arange(5), 16))
    _assert_close_to_exact(got, _exact(x, torch.arange(5), "half"), torch.float32)


@needs_triton
def test_every_shape_apply_rope_takes(interpret):
    """x [b, s, d] with per-sequence angles, [n, s, d] and [s, d] with shared ones; an expanded x."""
    positions = torch.arange(10).view(2, 5)
    cos_b, sin_b = _angles(positions, 8)  # [2, 5, 4]
    cos, sin = _angles(torch.arange(5), 8)  # [5, 4]
    (x3,) = _tensors((2, 5, 8))
    (x2,) = _tensors((5, 8))
    cases = [
        (x3, cos_b, sin_b),
        (x3, cos, sin),
        (x2, cos, sin),
        (x2.expand(3, 2, 5, 8), cos, sin),
        (x3.unsqueeze(1).expand(2, 3, 5, 8), cos_b[:1], sin_b[:1]),
    ]
    for x, c, s in cases:
        expected = apply_rope(x.double(), c.double(), s.double(), backend="eager")
        _assert_close_to_exact(apply_rope_triton(x, c, s), expected, torch.float32)


@needs_triton
def test_q_and_k_of_other_lengths_and_their_own_angles_as_in_decoding(interpret):
    """One query at position 9 against 10 cached keys, in one launch; xPos-like scaled tables for k."""
    q, k = _tensors((2, 4, 1, 8)) + _tensors((2, 2, 10, 8), seed=1)
    q_cos, q_sin = _angles(torch.tensor([9]), 8)
    k_cos, k_sin = (t * 0.5 for t in _angles(torch.arange(10), 8))
    got = apply_rope_qk_triton(q, k, q_cos, q_sin, k_cos=k_cos, k_sin=k_sin)
    torch.testing.assert_close(got[0], apply_rope(q, q_cos, q_sin, backend="eager"), atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(got[1], apply_rope(k, k_cos, k_sin, backend="eager"), atol=1e-5, rtol=1e-6)


@needs_triton
def test_nan_stays_nan_in_bfloat16(interpret):
    x = torch.tensor([[float("nan"), 1.0, 2.0, 3.0]]).to(torch.bfloat16)
    got = apply_rope_triton(x, torch.ones(1, 2), torch.zeros(1, 2))
    assert got[0, 0].isnan() and got[0, 2].isnan()  # the pair (0, 2) holds the NaN
    assert torch.equal(got[0, 1::2], x[0, 1::2])  # the pair (1, 3) turned by 0


# --- dispatch --------------------------------------------------------------------------------------


@needs_triton
def test_apply_rope_forced_to_triton_and_to_the_reference(interpret):
    (x,) = _tensors((1, 2, 5, 8), torch.bfloat16)
    cos, sin = _angles(torch.arange(5), 8)
    assert torch.equal(apply_rope(x, cos, sin, backend="triton"), apply_rope_triton(x, cos, sin))
    reference = functional_rope._apply_rope_reference(x, cos, sin, "half", 8)
    assert torch.equal(apply_rope(x, cos, sin, backend="eager"), reference)  # products in bfloat16
    q, k = apply_rope_qk(x, x[:, :1], cos, sin, backend="triton")
    assert torch.equal(q, apply_rope_triton(x, cos, sin))


def test_apply_rope_auto_takes_the_native_kernel_on_cpu_with_or_without_autograd(monkeypatch, interpret):
    calls = []
    monkeypatch.setattr(rope_triton, "apply_rope_triton", lambda *a, **k: calls.append("triton"))
    from posenc.kernels import rope_cpu

    original = rope_cpu.apply_rope_native
    monkeypatch.setattr(
        rope_cpu, "apply_rope_native", lambda *a, **k: calls.append("native") or original(*a, **k)
    )
    (x,) = _tensors((1, 2, 5, 8))
    cos, sin = _angles(torch.arange(5), 8)
    got = apply_rope(x, cos, sin)
    assert calls == ["native"]  # even where Triton's interpreter could run CPU tensors
    assert torch.allclose(got, apply_rope(x, cos, sin, backend="eager"), atol=1e-6, rtol=0)
    x.requires_grad_()
    apply_rope(x, cos, sin)
    assert calls == ["native", "native"]


@pytest.mark.skipif(
    not rope_triton.TRITON_INSTALLED, reason="auto picks Triton only where triton is installed"
)
def test_apply_rope_auto_picks_triton_for_cuda_tensors():
    """Fake CUDA tensors (no GPU needed): the dispatch reaches the custom op, whose fake kernel runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 6, 16, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(2, 2, 6, 16, device="cuda", dtype=torch.bfloat16)
        cos, sin = (
            torch.empty(6, 8, device="cuda", dtype=torch.float64),
            torch.empty(6, 8, device="cuda", dtype=torch.float64),
        )
        items = [("q", q, cos, sin), ("k", k, cos, sin)]
        assert functional_rope._path("auto", items, [16, 16]) == "triton"
        assert functional_rope._path("auto", [("x", q.double(), cos, sin)], [16]) == "eager"  # no float64
        wide = torch.empty(1, 1, 6, 512, device="cuda")
        assert functional_rope._path("auto", [("x", wide, cos, sin)], [16]) == "eager"
        assert functional_rope._path("eager", items, [16, 16]) == "eager"
        with pytest.raises(ValueError, match="the native kernel runs CPU tensors, got q on cuda"):
            functional_rope._path("native", items, [16, 16])
        q_rot, k_rot = apply_rope_qk(q, k, cos, sin)
        assert q_rot.shape == q.shape and q_rot.dtype == torch.bfloat16 and q_rot.device.type == "cuda"
        assert apply_rope(q, cos, sin).shape == q.shape


def test_auto_takes_the_reference_on_cuda_without_triton(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(rope_triton, "TRITON_INSTALLED", False)
    with FakeTensorMode():
        x = torch.empty(1, 2, 4, 8, device="cuda")
        cos = torch.empty(4, 4, device="cuda")
        assert functional_rope._path("auto", [("x", x, cos, cos)], [8]) == "eager"


def test_backend_is_checked_by_name():
    x = torch.zeros(1, 1, 4, 8)
    with pytest.raises(
        ValueError,
        match=r"backend must be one of 'auto', 'eager', 'native', 'triton' \(aliases: 'reference' for "
        r"'eager', 'cpu' for 'native'\); got 'cuda'",
    ):
        apply_rope(x, torch.zeros(4, 4), torch.zeros(4, 4), backend="cuda")
    with pytest.raises(ValueError, match="k_cos and k_sin must be given together"):
        apply_rope_qk(x, x, torch.zeros(4, 4), torch.zeros(4, 4), k_cos=torch.zeros(4, 4))


# --- bad input -------------------------------------------------------------------------------------


@needs_triton
def test_dtype_mismatches_are_named(interpret):
    x = torch.zeros(1, 2, 4, 8)
    cos, sin = _angles(torch.arange(4), 8)
    with pytest.raises(
        TypeError, match=r"q and k must have the same dtype, got q torch.float32 and k torch.bfloat16"
    ):
        apply_rope_qk(x, x.bfloat16(), cos, sin, backend="triton")
    with pytest.raises(
        TypeError, match=r"cos and sin must have the same dtype, got cos torch.float32 and sin torch.float64"
    ):
        apply_rope(x, cos, sin.double(), backend="triton")
    with pytest.raises(
        TypeError,
        match=r"cos and sin must be float32, float64 or x's dtype torch.bfloat16, got torch.float16",
    ):
        apply_rope(x.bfloat16(), cos.half(), sin.half(), backend="triton")
    with pytest.raises(
        TypeError, match=r"x must be float16, bfloat16 or float32 for the Triton kernels, got torch.float64"
    ):
        apply_rope(x.double(), cos, sin, backend="triton")
    # auto casts the tables itself, and leaves what the kernel cannot take to the reference
    assert torch.equal(apply_rope(x.double(), cos, sin), apply_rope(x.double(), cos, sin, backend="eager"))


@needs_triton
def test_head_width_above_the_maximum_is_refused_with_the_limit(interpret):
    d = MAX_D_HEAD + 2
    x = torch.zeros(1, 1, 2, d)
    cos, sin = _angles(torch.arange(2), d)
    with pytest.raises(
        ValueError, match=rf"q has head width {d}; the Triton kernels take at most {MAX_D_HEAD}"
    ):
        apply_rope_qk(x, x, cos, sin, backend="triton")
    assert apply_rope(x, cos, sin).shape == x.shape  # auto: the CPU path takes it


@needs_triton
def test_other_bad_inputs_are_refused_before_anything_is_rotated(interpret):
    q, k = _tensors((1, 2, 4, 8), count=2)
    before = q.clone()
    cos, sin = _angles(torch.arange(4), 8)
    with pytest.raises(ValueError, match=r"inplace needs k to own its memory, got an expanded view"):
        apply_rope_qk(q, k[:, :1].expand(1, 2, 4, 8), cos, sin, inplace=True, backend="triton")
    assert torch.equal(q, before)
    with pytest.raises(ValueError, match=r"would enlarge x of shape \(4, 8\); the Triton kernels"):
        apply_rope(q[0, 0], *_angles(torch.arange(8).view(2, 4), 8), backend="triton")
    with pytest.raises(ValueError, match="do not differentiate cos"):
        apply_rope(q, cos.requires_grad_(), sin, backend="triton")
    with pytest.raises(ValueError, match="rotary_dim must be even and at most the head width 8, got 10"):
        apply_rope(q, *_angles(torch.arange(4), 10), rotary_dim=10, backend="triton")
    with pytest.raises(ValueError, match=r"x must be \[b, h, s, d\], \[b, s, d\], \[n, s, d\] or \[s, d\]"):
        apply_rope(q[None], cos.detach(), sin, backend="triton")
    with pytest.raises(ValueError, match="one launch needs q and k of the same head width and rotary_dim"):
        k_cos, k_sin = _angles(torch.arange(4), 4)
        apply_rope_qk(q, q[..., :4], cos.detach(), sin, k_cos=k_cos, k_sin=k_sin, backend="triton")


@needs_triton
def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match=r"CPU tensors under TRITON_INTERPRET=1 .* got a tensor on cpu"):
        apply_rope(x, *_angles(torch.arange(4), 8), backend="triton")


def test_a_missing_triton_is_reported(monkeypatch, interpret):
    monkeypatch.setattr(rope_triton, "TRITON_INSTALLED", False)
    monkeypatch.setattr(rope_triton, "_kernels", {})
    with pytest.raises(RuntimeError, match=r"need the triton package \(pip install triton\)"):
        apply_rope_triton(torch.zeros(1, 1, 4, 8), *_angles(torch.arange(4), 8))
    assert not rope_triton.triton_available("cpu")


# --- custom ops and torch.compile ------------------------------------------------------------------


def test_custom_ops_are_registered_with_their_schemas():
    schemas = {name: str(getattr(torch.ops.posenc, name).default._schema) for name in ("rope", "rope_qk")}
    assert schemas["rope"].startswith(
        "posenc::rope(Tensor x, Tensor cos, Tensor sin, str layout, SymInt rotary_dim"
    )
    assert schemas["rope_qk"].endswith("-> (Tensor, Tensor)")
    inplace = str(torch.ops.posenc.rope_qk_inplace.default._schema)
    assert "Tensor(a0!) q, Tensor(a1!) k" in inplace and inplace.endswith("-> ()")


@needs_triton
@pytest.mark.parametrize("op", ["rope", "rope_qk", "rope_inplace", "rope_qk_inplace"])
def test_opcheck_passes_for_every_custom_op(interpret, op):
    """Schema, fake (meta) kernel, autograd registration and AOT dispatch with dynamic shapes."""
    q, k = _tensors((1, 2, 3, 8)) + _tensors((1, 1, 3, 8), seed=1)
    cos, sin = _angles(torch.arange(3), 6)
    differentiable = not op.endswith("inplace")
    if differentiable:
        q.requires_grad_()
        k.requires_grad_()
    args = {
        "rope": (q, cos, sin, "interleaved", 6, False),
        "rope_qk": (q, k, cos, sin, cos, sin, "half", 6, True),
        "rope_inplace": (q, cos, sin, "half", 6),
        "rope_qk_inplace": (q, k, cos, sin, cos, sin, "interleaved", 6),
    }[op]
    torch.library.opcheck(getattr(torch.ops.posenc, op).default, args)


@needs_triton
def test_torch_compile_traces_the_kernel_in_one_graph_forward_and_backward(interpret):
    """fullgraph=True: the custom op is one node (aot_eager: no C++ compiler needed on CPU)."""

    def attention_logits(q, k, cos, sin):
        q, k = apply_rope_qk(q, k, cos, sin, layout="interleaved", backend="triton")
        return q @ k.transpose(-1, -2)  # [b, h, s, s]

    q, k = (t.requires_grad_() for t in _tensors((1, 2, 4, 8), count=2))
    cos, sin = _angles(torch.arange(4), 8)
    torch._dynamo.reset()
    compiled = torch.compile(attention_logits, fullgraph=True, backend="aot_eager")
    got = compiled(q, k, cos, sin)
    expected = attention_logits(q, k, cos, sin)
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    grads = q.grad.clone(), k.grad.clone()
    q.grad = k.grad = None
    expected.sum().backward()
    torch.testing.assert_close(grads[0], q.grad)
    torch.testing.assert_close(grads[1], k.grad)


@needs_triton
@pytest.mark.slow
def test_torch_compile_with_inductor_on_cpu(interpret):
    """The default backend too (it builds C++ for the rest of the graph: several seconds)."""

    def attention(q, k, cos, sin):
        q, k = apply_rope_qk(q, k, cos, sin, backend="triton")
        return (q @ k.transpose(-1, -2)).softmax(dim=-1)  # [b, h, s, s]

    q, k = (t.requires_grad_() for t in _tensors((1, 2, 4, 8), count=2))
    cos, sin = _angles(torch.arange(4), 8)
    torch._dynamo.reset()
    got = torch.compile(attention, fullgraph=True)(q, k, cos, sin)
    torch.testing.assert_close(got, attention(q, k, cos, sin))
    got.sum().backward()
    assert q.grad is not None and k.grad is not None


def _compile_for_hopper(dtype: str, half_split: bool, copy_rest: bool, tensors: int):
    """The compiled (not interpreted) kernel built for sm_90 without a GPU, as a launch would build it
    for contiguous channels: channel strides 1; pointers, other strides, r/2 and d − r multiples of 16
    (d = 128 with r = 128 or 64). Its PTX."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if "nvidia" not in triton.backends.backends:
        pytest.skip("this triton has no NVIDIA backend")
    kernel = rope_triton._kernel(False)
    pointers = ("q", "q_out", "q_cos", "q_sin", "k", "k_out", "k_cos", "k_sin")
    constexprs = {
        "TENSORS": tensors,
        "HALF_SPLIT": half_split,
        "CONJUGATE": not copy_rest,
        "COPY_REST": copy_rest,
        "ROUND_BF16": dtype == "bf16",
        "BLOCK_S": 1,
        "BLOCK_H": 32,
        "BLOCK_R": 64,
        "BLOCK_P": 32,
        **dict.fromkeys(("q_sd", "qo_sd", "k_sd", "ko_sd"), 1),
    }
    signature = {
        name: "constexpr"
        if name in constexprs
        else ("*fp32" if name.endswith(("cos", "sin")) else f"*{dtype}")
        if name in pointers
        else "i32"
        for name in kernel.arg_names
    }
    aligned = [i for i, name in enumerate(kernel.arg_names) if signature[name] != "constexpr"]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}  # what a launch infers for such values
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]


@needs_triton
@pytest.mark.parametrize(
    ("dtype", "half_split", "copy_rest", "tensors"),
    [("bf16", True, True, 2), ("bf16", False, False, 2), ("fp16", False, True, 1), ("fp32", True, False, 1)],
)
def test_compiled_kernel_builds_for_hopper_with_16_byte_loads_and_stores(
    dtype, half_split, copy_rest, tensors
):
    """What the interpreter cannot show: the kernel compiles to PTX, and every global access is vectorised."""
    ptx = _compile_for_hopper(dtype, half_split, copy_rest, tensors)
    accesses = [
        word
        for line in ptx.splitlines()
        for word in line.split()
        if word.startswith(("ld.global", "st.global"))
    ]
    assert accesses and all(".v4." in word or ".v2." in word for word in accesses), sorted(set(accesses))


# --- CUDA ------------------------------------------------------------------------------------------


@needs_cuda
@needs_triton
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_forward_and_backward_match_float64(monkeypatch, layout, dtype):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q = (torch.randn(2, 8, 300, 128, device="cuda") * 2).to(dtype).requires_grad_()
    k = (torch.randn(2, 2, 300, 128, device="cuda") * 2).to(dtype).requires_grad_()
    positions = torch.arange(600, device="cuda").view(2, 300)
    inv_freq, _ = rope_inv_freq(96)
    cos, sin = rope_cos_sin(positions, inv_freq.cuda())
    cos64, sin64 = rope_cos_sin(positions, inv_freq.cuda(), dtype=torch.float64)
    got = apply_rope_qk(q, k, cos, sin, layout=layout, rotary_dim=96)  # auto: the Triton kernel
    grads = [torch.randn_like(g) for g in got]
    torch.autograd.backward(got, grads)
    for g, x, grad in zip(got, (q, k), grads, strict=True):
        leaf = x.detach().double().requires_grad_()
        exact = apply_rope(leaf, cos64, sin64, layout=layout, rotary_dim=96, backend="eager")
        exact.backward(grad.double())
        _assert_close_to_exact(g, exact.detach(), dtype)
        _assert_close_to_exact(x.grad, leaf.grad, dtype)


@needs_cuda
@needs_triton
def test_cuda_in_place_allocates_nothing(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q = torch.randn(4, 32, 1024, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    cos, sin = rope_cos_sin(torch.arange(1024, device="cuda"), rope_inv_freq(128)[0].cuda())
    apply_rope_qk_triton(q.clone(), k.clone(), cos, sin, inplace=True)  # compiles
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    apply_rope_qk_triton(q, k, cos, sin, inplace=True)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == before


@needs_cuda
@needs_triton
def test_cuda_torch_compile_fullgraph_with_inductor(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    def rotate(q, k, cos, sin):
        return apply_rope_qk(q, k, cos, sin)

    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cos, sin = rope_cos_sin(torch.arange(64, device="cuda"), rope_inv_freq(64)[0].cuda())
    torch._dynamo.reset()
    got = torch.compile(rotate, fullgraph=True)(q, k, cos, sin)
    for g, e in zip(got, rotate(q, k, cos, sin), strict=True):
        assert torch.equal(g, e)
    sum(g.float().sum() for g in got).backward()
    assert q.grad is not None and k.grad is not None


@needs_cuda
@needs_triton
def test_cuda_rotary_module_uses_the_kernel(monkeypatch):
    import posenc

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    calls = []
    original = rope_triton.apply_rope_qk_triton
    monkeypatch.setattr(
        rope_triton, "apply_rope_qk_triton", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    encoding = posenc.build("rope", d_head=64, rotary_dim=32).cuda()
    q = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 16, 64, device="cuda", dtype=torch.bfloat16)
    got = encoding.rotate(q, k)
    expected = encoding.cpu().rotate(q.cpu().float(), k.cpu().float())
    assert calls == [1]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu().float(), e, atol=1e-5, rtol=2**-8)


def test_posenc_imports_and_rotates_without_triton():
    """A fresh interpreter where ``import triton`` fails: posenc imports, apply_rope runs, the kernel says why not."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, posenc\n"
        "from posenc.functional.rope import apply_rope\n"
        "from posenc.kernels import rope_triton\n"
        "assert not rope_triton.TRITON_INSTALLED and not rope_triton.triton_available('cuda')\n"
        "x = torch.randn(1, 2, 4, 8); cos, sin = torch.ones(4, 4), torch.zeros(4, 4)\n"
        "assert torch.equal(apply_rope(x, cos, sin), x)\n"
        "try:\n"
        "    rope_triton.apply_rope_triton(x, cos, sin)\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "the Triton RoPE kernels need the triton package (pip install triton)" in done.stdout
