"""The rope module: one position contract for training, decoding and packing; exact caches; compile."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch._dynamo.testing

import posenc
from posenc.encodings import RotaryEncoding
from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq, xpos_scale
from posenc.model import TransformerLM


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
        (torch.arange(9), r"positions must have shape \[10\], \[1, 10\] or \[2, 10\]"),
        (torch.zeros(3, 10, dtype=torch.long), r"positions must have shape \[10\], \[1, 10\] or \[2, 10\]"),
        (torch.full((10,), float("inf")), "finite"),  # float positions are turned as given; inf is no position
        (
            torch.arange(-(2**27), -(2**27) + 10),
            r"positions must satisfy \|position\| < 2\^27, got -134217728",
        ),
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
    with pytest.raises(RuntimeError, match=re.escape("positions must satisfy |position| < 2^27")):
        rotate(x, x, torch.tensor([-3, 2**27]))


@pytest.mark.parametrize("scaling", [None, "yarn"])
def test_negative_positions_turn_by_the_exact_negative_angle(scaling):
    # they were refused, though sinusoidal, ALiBi and T5 take them and grid_positions(prefix_position=-1)
    # gives one; cos is even and sin odd, so the cache of 0, 1, … serves them exactly
    args = {"factor": 4.0, "original_max_position_embeddings": 64} if scaling else {}
    rope = RotaryEncoding(16, scaling=scaling, scaling_args=args)
    positions = torch.tensor([-(2**27) + 1, -70000, -5, -1, 0, 3, 2**20])
    cos, sin = rope.cos_sin(positions)
    expected_cos, expected_sin = rope_cos_sin(positions, rope.inv_freq, dtype=torch.float64)
    expected_cos, expected_sin = expected_cos * rope.attention_factor, expected_sin * rope.attention_factor
    torch.testing.assert_close(cos, expected_cos, rtol=0, atol=1e-15)
    torch.testing.assert_close(sin, expected_sin, rtol=0, atol=1e-15)
    reference = [[math.sin(p * float(f)) for f in rope.inv_freq.tolist()] for p in (-5, -1)]
    torch.testing.assert_close(sin[2:4] / rope.attention_factor, torch.tensor(reference, dtype=torch.float64))
    with pytest.raises(ValueError, match=re.escape("|position| < 2^27, got -134217728")):
        rope.cos_sin(torch.tensor([-(2**27)]))


def test_rope_takes_a_prefix_token_at_position_minus_one():
    rope = RotaryEncoding(8)
    q = k = torch.randn(1, 2, 4, 8)
    positions = torch.tensor([-1, 0, 1, 2])
    rotated_q, rotated_k = rope.rotate(q, k, positions, positions)
    shifted_q, shifted_k = rope.rotate(q, k, positions + 1, positions + 1)
    torch.testing.assert_close(
        rotated_q @ rotated_k.transpose(-1, -2), shifted_q @ shifted_k.transpose(-1, -2)
    )


# --- the softmax scale a scaling calls for (DeepSeek's YaRN), on every attention backend ----------------

DEEPSEEK = {"factor": 40.0, "original_max_position_embeddings": 32, "mscale": 0.8, "mscale_all_dim": 0.6}


def _attention_reference(attention, x, positions, scale) -> torch.Tensor:
    """softmax(q·kᵀ·scale + bias + causal mask)·v in float64, from the layer's weights and the formulas."""
    from posenc.functional.rope import rope_cos_sin

    b, s, _ = x.shape
    h, d = attention.n_heads, attention.d_head
    x = x.double()

    def heads(linear):
        return (x @ linear.weight.double().T).view(b, s, -1, d).transpose(1, 2)  # [b, h, s, d]

    q, k, v = heads(attention.q_proj), heads(attention.k_proj), heads(attention.v_proj)
    encoding = attention.encoding
    if isinstance(encoding, RotaryEncoding):
        inv_freq, factor = rope_inv_freq(
            encoding.rotary_dim, base=encoding.base, scaling=encoding.scaling, **encoding.scaling_args
        )
        cos, sin = rope_cos_sin(positions, inv_freq, dtype=torch.float64, attention_factor=factor)
        q, k = apply_rope(q, cos, sin, backend="eager"), apply_rope(k, cos, sin, backend="eager")
    scores = (q @ k.transpose(-1, -2)) * scale  # [b, h, s, s]
    bias = encoding.bias(positions, positions)
    if bias is not None:
        scores = scores + bias.double()
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, s, h * d)
    return out @ attention.out_proj.weight.double().T


def _layers(encoding, backends=posenc.backends.ATTENTION):
    from posenc.attention import MultiHeadAttention

    torch.manual_seed(0)
    first = MultiHeadAttention(32, 2, encoding=encoding, backend=backends[0])
    layers = {backends[0]: first}
    for backend in backends[1:]:
        layer = MultiHeadAttention(32, 2, encoding=encoding, backend=backend)
        layer.load_state_dict(first.state_dict())
        layers[backend] = layer
    return layers


def test_deepseek_yarn_softmax_scale_is_used_by_every_attention_backend():
    rope = RotaryEncoding(16, scaling="deepseek_yarn", scaling_args=DEEPSEEK)
    scale = (0.1 * 0.6 * math.log(40.0) + 1) ** 2 / 16**0.5
    assert rope.logit_scale(16) == pytest.approx(scale, rel=1e-12)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(9) + 30  # across the original length: the scale does not depend on it
    for backend, layer in _layers(rope).items():
        expected = _attention_reference(layer, x, positions, scale)
        with torch.no_grad():
            out = layer(x, positions)
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=2e-6, msg=backend)


def test_a_planted_softmax_scale_without_mscale_is_caught_by_the_reference(monkeypatch):
    rope = RotaryEncoding(16, scaling="deepseek_yarn", scaling_args=DEEPSEEK)
    scale = rope.logit_scale(16)
    monkeypatch.setattr(RotaryEncoding, "logit_scale", lambda self, d_head: d_head**-0.5)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1))
    layer = _layers(rope, ("eager",))["eager"]
    with torch.no_grad():
        out = layer(x, torch.arange(9))
    assert (out.double() - _attention_reference(layer, x, torch.arange(9), scale)).abs().max() > 1e-3


def test_other_scalings_keep_one_over_root_d():
    assert RotaryEncoding(64).logit_scale(64) == 64**-0.5
    yarn = RotaryEncoding(64, scaling="yarn", scaling_args=DEEPSEEK)  # transformers' yarn: cos/sin only
    assert yarn.logit_scale(64) == 64**-0.5


def test_the_per_distance_path_and_every_backend_take_the_encodings_logit_scale(monkeypatch):
    """A bias encoding (ALiBi) that declares another scale: the per-distance SDPA path reads it too."""
    import posenc.attention
    from posenc.encodings.bias import ALiBi

    class ScaledALiBi(ALiBi):
        def logit_scale(self, d_head: int) -> float:
            return 0.3

    taken = []
    per_distance = posenc.attention.per_distance_attention

    def spy(*args, **kwargs):
        taken.append(kwargs.get("scale"))
        return per_distance(*args, **kwargs)

    monkeypatch.setattr(posenc.attention, "per_distance_attention", spy)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(9)
    for backend, layer in _layers(ScaledALiBi(n_heads=2)).items():
        with torch.no_grad():
            out = layer(x, positions)
        expected = _attention_reference(layer, x, positions, 0.3)
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=2e-6, msg=backend)
    assert taken == [0.3]  # sdpa went through the per-distance path, with the scale


# --- dynamic NTK as transformers keeps it: the longest length seen ----------------------------------------


def test_dynamic_longest_keeps_transformers_state_after_a_long_call_then_a_short_one():
    transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=2,
        head_dim=32,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    )
    theirs = LlamaRotaryEmbedding(config)
    args = {"factor": 2.0, "original_max_position_embeddings": 64}
    ours = RotaryEncoding(32, scaling="dynamic", scaling_args=args, dynamic_length="longest")
    per_call = RotaryEncoding(32, scaling="dynamic", scaling_args=args)
    x = torch.zeros(1, 1, 32)
    for length, grown in ((100, 100), (80, 100), (10, 64), (70, 70), (90, 90), (66, 90)):
        positions = torch.arange(length)
        their_cos, their_sin = theirs(x, positions[None])  # [1, s, 32] = cat((c, c))
        cos, sin = ours.cos_sin(positions)  # [s, 16]
        assert ours.dynamic_seen == grown
        torch.testing.assert_close(cos.float(), their_cos[0, :, :16], rtol=0, atol=2e-5)
        torch.testing.assert_close(sin.float(), their_sin[0, :, :16], rtol=0, atol=2e-5)
        call_cos, _ = per_call.cos_sin(positions)
        if grown > max(length, 64):  # the per-call default follows this call alone
            assert (call_cos.float() - their_cos[0, :, :16]).abs().max() > 1e-3


def test_dynamic_longest_moves_its_state_once_per_rotate_call():
    args = {"factor": 2.0, "original_max_position_embeddings": 16}
    rope = RotaryEncoding(8, scaling="dynamic", scaling_args=args, dynamic_length="longest")
    q, k = qk(b=1, h=1, s=30, d=8, dtype=torch.float64)
    q_rot, k_rot = rope.rotate(q[:, :, -1:], k, torch.tensor([29]), torch.arange(30))
    assert rope.dynamic_seen == 30
    inv_freq, _ = rope_inv_freq(8, scaling="dynamic", seq_len=30, **args)
    cos, sin = rope_cos_sin(torch.arange(30), inv_freq, dtype=torch.float64)
    torch.testing.assert_close(k_rot, apply_rope(k, cos, sin, backend="eager"), rtol=0, atol=1e-14)
    torch.testing.assert_close(
        q_rot, apply_rope(q[:, :, -1:], cos[-1:], sin[-1:], backend="eager"), rtol=0, atol=1e-14
    )


def test_dynamic_length_is_checked_and_only_for_dynamic():
    with pytest.raises(ValueError, match="dynamic_length must be one of 'call', 'longest'; got 'max'"):
        RotaryEncoding(
            8,
            scaling="dynamic",
            scaling_args={"factor": 2.0, "original_max_position_embeddings": 8},
            dynamic_length="max",
        )
    with pytest.raises(
        ValueError, match="dynamic_length='longest' is for scaling='dynamic', got scaling='linear'"
    ):
        RotaryEncoding(8, scaling="linear", scaling_args={"factor": 2.0}, dynamic_length="longest")


# --- LongRoPE never mixes its factor sets in one KV cache ------------------------------------------------

LONGROPE = {
    "short_factor": [1.0, 1.1, 1.3, 1.7],
    "long_factor": [1.0, 2.0, 5.0, 9.0],
    "original_max_position_embeddings": 16,
    "factor": 4.0,
}


def test_longrope_takes_the_long_factors_for_a_call_past_the_original_length():
    rope = RotaryEncoding(8, scaling="longrope", scaling_args=LONGROPE)
    q, k = qk(b=1, h=1, s=20, d=8, dtype=torch.float64)
    for length, seq_len in ((16, 16), (17, 17), (20, 20)):
        q_rot, k_rot = rope.rotate(q[:, :, :length], k[:, :, :length])
        inv_freq, factor = rope_inv_freq(8, scaling="longrope", seq_len=seq_len, **LONGROPE)
        cos, sin = rope_cos_sin(torch.arange(length), inv_freq, dtype=torch.float64, attention_factor=factor)
        torch.testing.assert_close(
            k_rot, apply_rope(k[:, :, :length], cos, sin, backend="eager"), rtol=0, atol=1e-14
        )
    assert not rope.capabilities.rotated_keys_are_cacheable  # the cache keeps keys unrotated
    fixed = RotaryEncoding(8, scaling="longrope", scaling_args=LONGROPE | {"seq_len": 100})
    assert fixed.capabilities.rotated_keys_are_cacheable  # one set for good


def _longrope_model(n_layers: int, backend: str = "sdpa", **kwargs) -> TransformerLM:
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=8, scaling="longrope", scaling_args=LONGROPE, **kwargs)
    return TransformerLM(32, d_model=16, n_layers=n_layers, n_heads=2, encoding=rope, backend=backend).eval()


TOKENS = torch.randint(0, 32, (2, 24), generator=torch.Generator().manual_seed(3))


def _decoded(model, caches, start: int, stop: int) -> list[torch.Tensor]:
    """Last-token logits of steps start … stop − 1, one token a call."""
    return [model(TOKENS[:, t : t + 1], caches=caches)[:, -1] for t in range(start, stop)]


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_longrope_rerotated_cache_decoding_across_the_original_length_equals_a_full_recompute(backend):
    """One attention layer: the cached keys turn again with the long factors at the step that crosses."""
    model = _longrope_model(1, backend, longrope_switch="rerotate")
    caches = model.new_caches()
    with torch.no_grad():
        logits = [model(TOKENS[:, :10], caches=caches)[:, -1], *_decoded(model, caches, 10, 24)]
        for step, t in enumerate(range(9, 24)):  # positions 9 … 23; the step at 16 crosses
            full = model(TOKENS[:, : t + 1])[:, -1]
            torch.testing.assert_close(logits[step], full, rtol=0, atol=1e-5, msg=f"position {t}")
        # control: the switch is visible (the first tokens read differently once the call is long)
        assert (model(TOKENS[:, :16])[:, 10] - model(TOKENS[:, :20])[:, 10]).abs().max() > 1e-3


def test_longrope_refuses_a_decoding_step_past_the_original_length_on_a_short_cache():
    """Two layers: the second layer's cached keys and values come from states of the short factors,
    which a full recompute replaces; the step is refused, and a cache filled again from the start
    decodes as the full recompute does."""
    model = _longrope_model(2)
    caches = model.new_caches()
    with torch.no_grad():
        model(TOKENS[:, :16], caches=caches)  # positions 0 … 15: short factors
        with pytest.raises(
            ValueError, match=r"LongRoPE switches to its long factors at position 16 .* up to 15"
        ):
            model(TOKENS[:, 16:17], caches=caches)
        caches = model.new_caches()
        model(TOKENS[:, :17], caches=caches)  # the whole sequence once, past the original length
        for step, logits in enumerate(_decoded(model, caches, 17, 24)):
            t = 17 + step
            full = model(TOKENS[:, : t + 1])[:, -1]
            torch.testing.assert_close(logits, full, rtol=0, atol=1e-5, msg=f"position {t}")


def test_longrope_rerotation_alone_is_not_a_full_recompute_in_a_deeper_model():
    """Why refusing is the default: re-rotated keys of the second layer still carry short-factor states."""
    model = _longrope_model(2, longrope_switch="rerotate")
    caches = model.new_caches()
    with torch.no_grad():
        model(TOKENS[:, :16], caches=caches)
        (crossing,) = _decoded(model, caches, 16, 17)
        assert (crossing - model(TOKENS[:, :17])[:, -1]).abs().max() > 1e-4


def test_longrope_switch_is_checked_and_only_for_longrope():
    with pytest.raises(ValueError, match="longrope_switch must be one of 'refuse', 'rerotate'; got 'drop'"):
        RotaryEncoding(8, scaling="longrope", scaling_args=LONGROPE, longrope_switch="drop")
    with pytest.raises(
        ValueError, match="longrope_switch='rerotate' is for scaling='longrope', got scaling=None"
    ):
        RotaryEncoding(8, longrope_switch="rerotate")


def test_longrope_under_compile_picks_the_set_on_the_device():
    rope = RotaryEncoding(8, scaling="longrope", scaling_args=LONGROPE)
    compiled = torch.compile(rope.rotate, fullgraph=True, backend="eager")
    for length in (12, 20):
        q, k = qk(b=1, h=1, s=length, d=8)
        torch.testing.assert_close(compiled(q, k), rope.rotate(q, k), rtol=0, atol=1e-6)


def test_the_xpos_flag_must_be_a_bool():
    # bool("False") is True: the string turned xPos on
    with pytest.raises(TypeError, match="xpos must be True or False"):
        posenc.build("rope", d_head=8, xpos="False")


def test_dynamic_ntk_refuses_a_fixed_seq_len():
    # the table was built at the fixed length for calls below the original length and replaced by the
    # call's own above it (1.6 apart in cos at positions 100 … 109)
    args = {"factor": 4.0, "original_max_position_embeddings": 64, "seq_len": 256}
    with pytest.raises(ValueError, match="scaling='dynamic' follows the length of each call; seq_len=256"):
        posenc.build("rope", d_head=16, scaling="dynamic", scaling_args=args)


@pytest.mark.parametrize("scaling", [None, "dynamic"])
def test_rotating_no_query_gives_empty_outputs(scaling):
    # it crashed inside torch (min() of an empty tensor)
    args = {"factor": 4.0, "original_max_position_embeddings": 64} if scaling else None
    rope = posenc.build("rope", d_head=8, scaling=scaling, scaling_args=args)
    q, k = torch.randn(1, 1, 0, 8), torch.randn(1, 1, 4, 8)
    rotated_q, rotated_k = rope.rotate(q, k)  # queries: the last 0 of the 4 keys
    assert rotated_q.shape == q.shape
    torch.testing.assert_close(rotated_k, rope.rotate(k, k)[1])


def test_float_positions_on_one_axis_turn_by_the_formula_at_exactly_those_positions():
    # continuous positions (a remap's fine-tune, interpolation by hand) were refused on one axis
    rope = posenc.build("rope", d_head=16).double()
    q = torch.randn(1, 2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([0.5, 1.25, 3.0, 7.75, 1e5 + 0.1], dtype=torch.float64)
    turned, _ = rope.rotate(q, q, positions, positions)
    angle = positions[:, None] * 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)  # [s, 8]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)  # [s, 16]
    expected = q * cos + torch.cat([-q[..., 8:], q[..., :8]], -1) * sin
    torch.testing.assert_close(turned, expected, rtol=0, atol=1e-10)
    whole = torch.tensor([0, 1, 3, 7, 100])
    assert torch.equal(rope.rotate(q, q, whole.double(), whole.double())[0], rope.rotate(q, q, whole, whole)[0])
    with pytest.raises(ValueError, match="finite"):
        rope.rotate(q, q, positions * float("nan"), positions)
