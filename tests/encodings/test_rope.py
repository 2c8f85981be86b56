"""The rope module: one position contract for training, decoding and packing; exact caches; compile."""

from __future__ import annotations

import re

import pytest
import torch
import torch._dynamo.testing

import posenc
from posenc.encodings import RotaryEncoding
from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq, xpos_scale


def qk(b=2, h=4, s=10, d=32, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, s, d, generator=generator).to(dtype),
        torch.randn(b, h, s, d, generator=generator).to(dtype),
    )


def test_rotate_equals_the_functional_api():
    rope = posenc.build("rope", d_head=32, layout="interleaved", rotary_dim=16)
    q, k = qk()
    q_rot, k_rot = rope.rotate(q, k)
    cos, sin = rope_cos_sin(torch.arange(10), rope_inv_freq(16)[0])
    assert torch.equal(q_rot, apply_rope(q, cos, sin, layout="interleaved", rotary_dim=16))
    assert torch.equal(k_rot, apply_rope(k, cos, sin, layout="interleaved", rotary_dim=16))
    assert rope.kind == "rotary" and sum(p.numel() for p in rope.parameters()) == 0


def test_decoding_one_token_at_an_offset_matches_the_full_sequence():
    rope = RotaryEncoding(32)
    q, k = qk(s=12)
    full_q, full_k = rope.rotate(q, k)
    step_q, step_k = rope.rotate(q[:, :, 11:], k[:, :, 11:], torch.tensor([11]), torch.tensor([11]))
    torch.testing.assert_close(step_q, full_q[:, :, 11:], rtol=0, atol=0)
    torch.testing.assert_close(step_k, full_k[:, :, 11:], rtol=0, atol=0)
    default_q, _ = rope.rotate(q[:, :, 11:], k)  # default: the query is the last of the keys' positions
    torch.testing.assert_close(default_q, full_q[:, :, 11:], rtol=0, atol=0)


def test_left_padding_and_packed_sequences_are_positions_per_row():
    rope = RotaryEncoding(16)
    q, k = qk(b=2, s=6, d=16)
    positions = torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 0, 1, 2]])  # row 0 left-padded, row 1 packed
    q_rot, _ = rope.rotate(q, k, positions, positions)
    single, _ = rope.rotate(q[1:, :, 3:], k[1:, :, 3:], torch.arange(3), torch.arange(3))
    torch.testing.assert_close(q_rot[1:, :, 3:], single, rtol=0, atol=0)  # restarts at 0
    torch.testing.assert_close(
        q_rot[:1, :, 3:],
        rope.rotate(q[:1, :, 3:], k[:1, :, 3:], torch.arange(1, 4), torch.arange(1, 4))[0],
        rtol=0,
        atol=0,
    )


def test_cache_grows_on_demand_and_is_not_saved():
    rope = RotaryEncoding(16)
    q, k = qk(b=1, s=4, d=16)
    rope.rotate(q, k, torch.arange(100, 104), torch.arange(100, 104))
    assert rope.cos_cached.shape[0] >= 104 and rope.cos_cached.dtype == torch.float64
    assert rope.state_dict() == {}


def test_a_bfloat16_module_never_quantises_frequencies_or_cache():
    rope = RotaryEncoding(64)
    q, k = qk(b=1, s=300, d=64)
    before = rope.rotate(q, k)
    rope.to(torch.bfloat16)
    assert rope.inv_freq_pieces.dtype == torch.float64 and rope.cos_cached.dtype == torch.float64
    rope.to(torch.float32)
    after = rope.rotate(q, k)
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])


def test_dynamic_ntk_recomputes_frequencies_past_the_original_length():
    rope = RotaryEncoding(
        32, scaling="dynamic", scaling_args={"factor": 2.0, "original_max_position_embeddings": 64}
    )
    q, k = qk(b=1, s=100, d=32, dtype=torch.float64)
    q_rot, _ = rope.rotate(q, k)
    inv_freq, _ = rope_inv_freq(
        32, scaling="dynamic", factor=2.0, original_max_position_embeddings=64, seq_len=100
    )
    cos, sin = rope_cos_sin(torch.arange(100), inv_freq, dtype=torch.float64)
    torch.testing.assert_close(q_rot, apply_rope(q, cos, sin), rtol=0, atol=1e-15)
    short_q, _ = rope.rotate(q[:, :, :64], k[:, :, :64])
    plain = RotaryEncoding(32).rotate(q[:, :, :64], k[:, :, :64])[0]
    torch.testing.assert_close(short_q, plain, rtol=0, atol=0)  # unchanged below the original length


def test_yarn_attention_factor_scales_the_logits_by_its_square():
    rope = RotaryEncoding(
        32, scaling="yarn", scaling_args={"factor": 4.0, "original_max_position_embeddings": 64}
    )
    q, k = qk(b=1, s=8, d=32, dtype=torch.float64)
    q_rot, k_rot = rope.rotate(q, k)
    assert float(q_rot.norm(dim=-1).div(q.norm(dim=-1)).mean()) == pytest.approx(
        rope.attention_factor, rel=1e-12
    )


def test_xpos_scales_queries_and_keys_from_the_centre_of_the_queries():
    rope = RotaryEncoding(16, xpos=True)
    plain = RotaryEncoding(16)
    q, k = qk(b=1, s=5, d=16, dtype=torch.float64)
    q_x, k_x = rope.rotate(q, k)
    q_p, k_p = plain.rotate(q, k)
    scale = xpos_scale(torch.arange(5), 16, reference=2)  # [s, r/2]: positions 0 … 4, centre 2
    half_scale = torch.cat((scale, scale), dim=-1)  # half layout: pair k at (k, k + r/2)
    torch.testing.assert_close(q_x, q_p * half_scale, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(k_x, k_p / half_scale, rtol=1e-14, atol=1e-15)


XPOS_FAR = 2**20  # far past where ζ^(pos/512) leaves float32 (about 36,000) and float16 (about 4,500)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_xpos_logits_are_finite_and_shift_invariant_at_a_million_positions(dtype):
    # measured from position 0 the key scale ζ^(−pos/512) overflowed: q·k was NaN from about 36,000
    rope = RotaryEncoding(16, xpos=True)
    q, k = qk(b=2, s=24, d=16)
    positions = torch.arange(24)
    near_q, near_k = rope.rotate(q.to(dtype), k.to(dtype), positions, positions)
    far_q, far_k = rope.rotate(q.to(dtype), k.to(dtype), positions + XPOS_FAR, positions + XPOS_FAR)
    near = (near_q.double() @ near_k.double().transpose(-1, -2)).tril()  # [b, h, i, j], causal pairs
    far = (far_q.double() @ far_k.double().transpose(-1, -2)).tril()
    assert far.isfinite().all()
    exact_q, exact_k = rope.rotate(q.double(), k.double(), positions, positions)
    exact = (exact_q @ exact_k.transpose(-1, -2)).tril()
    tolerance = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 0.06) * exact.abs().max()
    assert (far - exact).abs().max() <= tolerance and (near - exact).abs().max() <= tolerance


def test_xpos_kv_cache_decoding_at_a_million_positions_equals_the_full_forward():
    from posenc.model import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(
        32, d_model=32, n_layers=2, n_heads=2, encoding=RotaryEncoding(16, xpos=True)
    ).eval()
    tokens = torch.randint(0, 32, (2, 10))
    positions = torch.arange(10) + XPOS_FAR
    with torch.no_grad():
        full = model(tokens, positions)
        caches = model.new_caches()
        steps = [model(tokens[:, :4], positions[:4], caches)]
        steps += [model(tokens[:, i : i + 1], positions[i : i + 1], caches) for i in range(4, 10)]
    assert full.isfinite().all()
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("dtype", "span"), [(torch.float16, 5000), (torch.float32, 40000)])
def test_xpos_refuses_a_call_too_wide_for_the_dtype_naming_positions_and_dtype(dtype, span):
    rope = RotaryEncoding(16, xpos=True)
    x = torch.zeros(1, 1, span, 16, dtype=dtype)
    positions = torch.arange(span) + 1000
    with pytest.raises(ValueError, match=f"xPos cannot scale query positions 1000 … {span + 999} in {dtype}"):
        rope.rotate(x, x, positions, positions)


def test_compiles_with_fullgraph_and_does_not_recompile_when_the_length_changes():
    torch._dynamo.reset()
    rope = RotaryEncoding(32)
    counts = torch._dynamo.testing.CompileCounter()

    @torch.compile(backend=counts, fullgraph=True, dynamic=True)
    def rotate(q, k, positions):
        return rope.rotate(q, k, positions, positions)

    for length in (7, 19, 64):
        q, k = qk(b=1, s=length, d=32)
        positions = torch.arange(length)
        compiled = rotate(q, k, positions)
        eager = rope.rotate(q, k, positions, positions)
        torch.testing.assert_close(compiled[0], eager[0], rtol=1.3e-6, atol=1e-6)  # float32 rounding
    assert counts.frame_count == 1


def test_dynamic_scaling_refuses_to_compile():
    torch._dynamo.reset()
    rope = RotaryEncoding(
        16, scaling="dynamic", scaling_args={"factor": 2.0, "original_max_position_embeddings": 8}
    )
    compiled = torch.compile(lambda q, k: rope.rotate(q, k), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="not inside torch.compile"):
        compiled(*qk(b=1, s=4, d=16))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_head": 32, "rotary_dim": 7}, "rotary_dim must be even, got 7"),
        ({"d_head": 32, "rotary_dim": 64}, "rotary_dim must be even and at most d_head=32, got 64"),
        ({"d_head": 32, "scaling": "yarn"}, "scaling 'yarn' needs factor, original_max_position_embeddings"),
        (
            {"d_head": 32, "scaling": "linear", "scaling_args": {"factor": 2.0, "low_freq_factor": 1.0}},
            "scaling 'linear' does not take low_freq_factor",
        ),
        ({"d_head": 32, "layout": "neox"}, "layout must be one of 'half', 'interleaved'; got 'neox'"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotaryEncoding(**kwargs)


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (torch.arange(9), r"positions must have shape \[10\] or \[2, 10\]"),
        (torch.zeros(3, 10, dtype=torch.long), r"positions must have shape \[10\] or \[2, 10\]"),
        (torch.arange(10.0), "positions must be integers, got dtype torch.float32"),
        (torch.arange(-1, 9), "positions must lie in 0 … 2\\^27 − 1, got -1"),
    ],
)
def test_bad_positions_are_named(positions, message):
    q, k = qk()
    with pytest.raises(ValueError, match=message):
        RotaryEncoding(32).rotate(q, k, positions, positions)


def test_heads_of_the_wrong_width_are_refused():
    q, k = qk(d=16)
    with pytest.raises(ValueError, match=r"q must have shape \[b, h, s, d_head=32\], got \(2, 4, 10, 16\)"):
        RotaryEncoding(32).rotate(q, k)


def test_bfloat16_heads_are_rotated_in_float32_and_rounded_once():
    rope = RotaryEncoding(64)
    q, k = qk(b=1, s=33, d=64)
    q_bf16, k_bf16 = q.to(torch.bfloat16), k.to(torch.bfloat16)
    q_rot, k_rot = rope.rotate(q_bf16, k_bf16)
    cos, sin = rope_cos_sin(torch.arange(33), rope.inv_freq, dtype=torch.float32)
    assert q_rot.dtype == torch.bfloat16
    # Within one bfloat16 unit (2^-8 relative): the C kernel is exact to this, the torch fallback
    # (POSENC_NATIVE=0) may fuse a multiply-add and so flip a rare rounding.
    for rotated, x in ((q_rot, q_bf16), (k_rot, k_bf16)):
        torch.testing.assert_close(
            rotated, apply_rope(x.float(), cos, sin).to(torch.bfloat16), rtol=2**-8, atol=0
        )


def test_far_positions_are_computed_without_caching_every_position_before_them():
    from posenc.encodings.rope import CACHE_POSITIONS
    from posenc.functional.rope import rope_cos_sin

    rope = RotaryEncoding(16)
    positions = torch.tensor([7, 2**21 - 1, 3 * 2**20])
    cos, sin = rope.cos_sin(positions)
    assert rope.cos_cached.shape[0] <= CACHE_POSITIONS
    expected_cos, expected_sin = rope_cos_sin(positions, rope.inv_freq, dtype=torch.float64)
    torch.testing.assert_close(cos, expected_cos, rtol=0, atol=1e-15)
    torch.testing.assert_close(sin, expected_sin, rtol=0, atol=1e-15)


@pytest.mark.parametrize(("dtype", "span"), [(torch.float16, 20000), (torch.bfloat16, 80000)])
def test_xpos_under_compile_stops_a_call_too_wide_for_the_dtype(dtype, span):
    # compiled, the range check used to be skipped and the logits came back inf or NaN without a word
    torch._dynamo.reset()
    rope = RotaryEncoding(16, xpos=True)
    rotate = torch.compile(lambda q, k, p: rope.rotate(q, k, p, p), fullgraph=True)
    x = torch.ones(1, 1, span, 16, dtype=dtype)
    with pytest.raises(RuntimeError, match="xPos cannot scale a call's queries or keys"):
        rotate(x, x, torch.arange(span))


def test_positions_beyond_the_exact_range_are_stopped_under_compile():
    torch._dynamo.reset()
    rope = RotaryEncoding(16)
    rotate = torch.compile(lambda q, k, p: rope.rotate(q, k, p, p), fullgraph=True)
    x = torch.ones(1, 1, 2, 16)
    assert torch.isfinite(rotate(x, x, torch.tensor([0, 2**27 - 1]))[0]).all()
    with pytest.raises(RuntimeError, match=re.escape("positions must lie in 0 … 2^27 − 1")):
        rotate(x, x, torch.tensor([-3, 2**27]))
