"""RoPE functional API against the seed formula, its claimed properties, precision and bad input."""

from __future__ import annotations

import math
import re

import mpmath
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.analysis import angle_error, rotation_matrix
from posenc.functional import (
    apply_rope,
    interleaved_to_half_permutation,
    permute_qk_weight,
    rope_cos_sin,
    rope_inv_freq,
    xpos_scale,
)
from posenc.functional.angles import reduced_angles, split_frequencies
from tests.reference.rope_loop import rope_vector


def rotate(x, positions, *, layout="half", rotary_dim=None, base=10000.0, dtype=torch.float64):
    r = rotary_dim or x.shape[-1]
    inv_freq, _ = rope_inv_freq(r, base=base)
    cos, sin = rope_cos_sin(positions, inv_freq, dtype=dtype)
    return apply_rope(x, cos, sin, layout=layout, rotary_dim=rotary_dim)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("rotary_dim", [None, 16, 8])
def test_apply_rope_matches_the_float64_loop(layout, rotary_dim):
    x = torch.randn(
        2, 3, 7, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )  # [b, h, s, d]
    positions = torch.tensor([0, 1, 2, 5, 100, 4095, 70000])
    out = rotate(x, positions, layout=layout, rotary_dim=rotary_dim)
    for b in range(2):
        for h in range(3):
            for s, position in enumerate(positions.tolist()):
                expected = rope_vector(x[b, h, s].tolist(), position, layout=layout, rotary_dim=rotary_dim)
                # the loop's naive float64 angle is off by ~pos·1e-16 (posenc's is exact; see the mpmath test)
                torch.testing.assert_close(
                    out[b, h, s], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-10
                )


def test_partial_rotary_leaves_the_tail_untouched():
    x = torch.randn(1, 2, 5, 64)
    out = rotate(x, torch.arange(5), rotary_dim=16, dtype=torch.float32)
    assert torch.equal(out[..., 16:], x[..., 16:])
    assert not torch.equal(out[..., 1:, :16], x[..., 1:, :16])


def test_interleaved_is_the_seed_formula_with_pairs_2k_2k_plus_1():
    x = torch.tensor([[[[1.0, 0.0, 0.0, 1.0]]]], dtype=torch.float64)  # [1, 1, 1, 4]
    out = rotate(x, torch.tensor([1]), layout="interleaved")
    theta1 = 10000.0 ** (-2 / 4)
    expected = [math.cos(1), math.sin(1), -math.sin(theta1), math.cos(theta1)]
    torch.testing.assert_close(out[0, 0, 0], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)


def test_batched_positions_rotate_each_sequence_by_its_own_positions():
    x = torch.randn(2, 4, 6, 16, dtype=torch.float64)
    positions = torch.tensor(
        [[0, 1, 2, 3, 4, 5], [7, 8, 9, 0, 1, 2]]
    )  # second row: left padding then packing
    out = rotate(x, positions)
    for b in range(2):
        torch.testing.assert_close(out[b : b + 1], rotate(x[b : b + 1], positions[b]), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_preserves_norms(layout):
    x = torch.randn(2, 4, 50, 64, dtype=torch.float64)
    out = rotate(x, torch.randint(0, 2**21, (50,)), layout=layout)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-14, atol=0)


@given(
    m=st.integers(0, 2**21),
    n=st.integers(0, 2**21),
    shift=st.integers(-(2**20), 2**20),
    layout=st.sampled_from(["interleaved", "half"]),
)
def test_query_key_product_depends_only_on_m_minus_n(m, n, shift, layout):
    if min(m, n) + shift < 0:
        shift = -min(m, n)
    generator = torch.Generator().manual_seed(m ^ n)
    q = torch.randn(1, 1, 1, 32, dtype=torch.float64, generator=generator)
    k = torch.randn(1, 1, 1, 32, dtype=torch.float64, generator=generator)

    def product(a: int, b: int) -> float:
        return float(
            (rotate(q, torch.tensor([a]), layout=layout) * rotate(k, torch.tensor([b]), layout=layout)).sum()
        )

    assert product(m + shift, n + shift) == pytest.approx(product(m, n), abs=1e-12)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_shifting_by_k_is_the_fixed_block_diagonal_rotation_M_k(layout):
    x = torch.randn(1, 1, 40, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    inv_freq, _ = rope_inv_freq(32)
    for offset in (1, 5, 999):
        shifted = rotate(x, torch.arange(40) + offset, layout=layout)  # R_{pos+k} x
        m_k = rotation_matrix(
            reduced_angles(torch.tensor(offset), split_frequencies(inv_freq)), layout=layout
        )
        residual = (shifted - rotate(x, torch.arange(40), layout=layout) @ m_k.T).abs().max()
        assert float(residual) < 4e-15  # a few float64 roundings of values up to |x|·2


def test_float32_cos_sin_are_within_1_2e_7_of_exact_up_to_2_pow_21():
    inv_freq, _ = rope_inv_freq(128, base=10000.0)
    positions = [2**21, 2**21 - 1, 2**20, 1_000_003] + torch.randint(
        0, 2**21, (12,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    cos, sin = rope_cos_sin(torch.tensor(positions), inv_freq, dtype=torch.float32)
    worst = 0.0
    with mpmath.workdps(40):
        for row, position in enumerate(positions):
            for k, theta in enumerate(inv_freq.tolist()):  # inv_freq is exact in float64 by definition
                angle = mpmath.mpf(position) * mpmath.mpf(theta)
                worst = max(
                    worst,
                    abs(float(cos[row, k]) - float(mpmath.cos(angle))),
                    abs(float(sin[row, k]) - float(mpmath.sin(angle))),
                )
    assert worst <= 1.2e-7


def test_the_float32_angle_recipe_loses_2e_2_at_2_pow_20_and_posenc_does_not():
    inv_freq, _ = rope_inv_freq(128)
    positions = torch.tensor([2**20])
    assert float(angle_error("float32", positions, inv_freq)[0]) > 2e-2
    assert float(angle_error("posenc", positions, inv_freq)[0]) <= 1.2e-7


def test_attention_factor_multiplies_cos_and_sin():
    inv_freq, factor = rope_inv_freq(16, scaling="yarn", factor=4.0, original_max_position_embeddings=64)
    cos, sin = rope_cos_sin(torch.arange(5), inv_freq, dtype=torch.float64, attention_factor=factor)
    plain_cos, plain_sin = rope_cos_sin(torch.arange(5), inv_freq, dtype=torch.float64)
    assert factor == pytest.approx(0.1 * math.log(4) + 1)
    torch.testing.assert_close(cos, plain_cos * factor, rtol=1e-15, atol=0)
    torch.testing.assert_close(sin, plain_sin * factor, rtol=1e-15, atol=0)


def test_scalings_follow_their_formulas():
    plain, _ = rope_inv_freq(64, base=10000.0)
    linear, _ = rope_inv_freq(64, scaling="linear", factor=4.0)
    ntk, _ = rope_inv_freq(64, scaling="ntk", factor=4.0)
    torch.testing.assert_close(linear, plain / 4, rtol=1e-15, atol=0)
    torch.testing.assert_close(
        ntk,
        (10000.0 * 4 ** (64 / 62)) ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64),
        rtol=1e-14,
        atol=0,
    )
    below, _ = rope_inv_freq(
        64, scaling="dynamic", factor=4.0, original_max_position_embeddings=2048, seq_len=1000
    )
    torch.testing.assert_close(below, plain, rtol=1e-15, atol=0)  # no change below the original length
    llama3, _ = rope_inv_freq(
        128, base=500000.0, scaling="llama3", factor=8.0, original_max_position_embeddings=8192
    )
    default3, _ = rope_inv_freq(128, base=500000.0)
    wavelength = 2 * math.pi / default3
    torch.testing.assert_close(
        llama3[wavelength < 2048], default3[wavelength < 2048], rtol=0, atol=0
    )  # high freqs kept
    torch.testing.assert_close(llama3[wavelength > 8192], default3[wavelength > 8192] / 8, rtol=1e-15, atol=0)
    yarn, _ = rope_inv_freq(64, scaling="yarn", factor=4.0, original_max_position_embeddings=2048)
    assert yarn[0] == plain[0] and yarn[-1] == pytest.approx(float(plain[-1]) / 4, rel=1e-14)


def test_layout_converter_permutes_pairs_and_round_trips():
    assert interleaved_to_half_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert interleaved_to_half_permutation(4, 6).tolist() == [0, 2, 1, 3, 4, 5]
    weight = torch.randn(3 * 8, 20)  # [h·d, d_in]
    half = permute_qk_weight(weight, 3, to="half")
    assert torch.equal(permute_qk_weight(half, 3, to="interleaved"), weight)


def test_converted_weights_give_identical_attention_scores():
    n_heads, head_dim, d_in = 2, 16, 24
    generator = torch.Generator().manual_seed(0)
    wq = torch.randn(n_heads * head_dim, d_in, dtype=torch.float64, generator=generator)
    wk = torch.randn(n_heads * head_dim, d_in, dtype=torch.float64, generator=generator)
    x = torch.randn(1, 9, d_in, dtype=torch.float64, generator=generator)  # [b, s, d_in]

    def scores(wq, wk, layout):
        q = (x @ wq.T).view(1, 9, n_heads, head_dim).transpose(1, 2)  # [b, h, s, d]
        k = (x @ wk.T).view(1, 9, n_heads, head_dim).transpose(1, 2)
        return rotate(q, torch.arange(9), layout=layout) @ rotate(
            k, torch.arange(9), layout=layout
        ).transpose(-1, -2)

    interleaved = scores(wq, wk, "interleaved")
    half = scores(permute_qk_weight(wq, n_heads), permute_qk_weight(wk, n_heads), "half")
    torch.testing.assert_close(half, interleaved, rtol=0, atol=1e-12)


def test_xpos_makes_the_product_relative_and_decaying():
    r = 32
    scale_q, scale_k = xpos_scale(torch.tensor([10, 510]), r), xpos_scale(torch.tensor([2, 502]), r)
    torch.testing.assert_close(
        scale_q[0] / scale_k[0], scale_q[1] / scale_k[1], rtol=1e-13, atol=0
    )  # same m − n
    zeta = (torch.arange(0, r, 2, dtype=torch.float64) / r + 0.4) / 1.4
    torch.testing.assert_close(xpos_scale(torch.tensor([512]), r)[0], zeta, rtol=1e-15, atol=0)
    assert bool((zeta <= 1).all())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rope_inv_freq(7), "rotary_dim must be even, got 7"),
        (lambda: rope_inv_freq(0), "rotary_dim must be positive, got 0"),
        (
            lambda: rope_inv_freq(64, scaling="ntk-by-parts"),
            "unknown scaling 'ntk-by-parts'; valid: None, 'linear', 'ntk', 'dynamic', 'yarn', 'llama3', 'longrope'",
        ),
        (
            lambda: rope_inv_freq(64, scaling="yarn", factor=4.0),
            "scaling 'yarn' needs original_max_position_embeddings",
        ),
        (
            lambda: rope_inv_freq(64, scaling="llama3"),
            "scaling 'llama3' needs factor, original_max_position_embeddings",
        ),
        (
            lambda: rope_inv_freq(64, scaling="linear", factor=2.0, beta_fast=3),
            "scaling 'linear' does not take beta_fast; it takes factor",
        ),
        (
            lambda: rope_inv_freq(64, scaling="linear", factor=-2.0),
            "factor must be positive and finite, got -2.0",
        ),
        (lambda: rope_inv_freq(64, factor=2.0), "scaling arguments given without a scaling: factor"),
        (
            lambda: rope_inv_freq(
                8,
                scaling="longrope",
                short_factor=[1.0] * 3,
                long_factor=[1.0] * 4,
                original_max_position_embeddings=64,
                factor=2.0,
            ),
            "short_factor must hold rotary_dim/2 = 4 values, got 3",
        ),
        (
            lambda: rope_cos_sin(torch.tensor([0.0, 1.0]), torch.ones(4)),
            "positions must be integers, got dtype torch.float32",
        ),
        (
            lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.zeros(4, 2), torch.zeros(4, 2)),
            "cos and sin must hold rotary_dim/2 = 4 frequencies, got 2",
        ),
        (
            lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.zeros(3, 4), torch.zeros(3, 4)),
            r"cos and sin must be \[s, r/2\] or \[b, s, r/2\] \(or per head \[b, h, s, r/2\] for a 4-d x\) with s = 4",
        ),
        (
            lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.zeros(4, 8), torch.zeros(4, 8), rotary_dim=16),
            "rotary_dim must be even and at most the head width 8, got 16",
        ),
        (
            lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.zeros(4, 4), torch.zeros(4, 4), layout="neox"),
            "layout must be one of 'half', 'interleaved'; got 'neox'",
        ),
    ],
)
def test_bad_input_raises_naming_the_value(call, message):
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)") if "\\" not in message else message
    ):
        call()


LONGROPE = {"long_factor": [1.0] * 4, "original_max_position_embeddings": 16, "factor": 2.0}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: rope_inv_freq(8, scaling="longrope", short_factor=[1, 1, 1, 0], **LONGROPE),
            ValueError,
            "short_factor[3] must be positive and finite, got 0",
        ),
        (
            lambda: rope_inv_freq(8, scaling="longrope", short_factor=[1, -2, 1, 1], **LONGROPE),
            ValueError,
            "short_factor[1] must be positive and finite, got -2",
        ),
        (
            lambda: rope_inv_freq(8, scaling="longrope", short_factor=[1, 1, float("nan"), 1], **LONGROPE),
            ValueError,
            "short_factor[2] must be positive and finite, got nan",
        ),
        (
            lambda: rope_inv_freq(8, scaling="longrope", short_factor="1111", **LONGROPE),
            TypeError,
            "short_factor must be a sequence of 4 numbers, got '1111' (str)",
        ),
        (
            lambda: rope_inv_freq(8, scaling="longrope", short_factor=["1"] * 4, **LONGROPE),
            TypeError,
            "short_factor[0] must be a real number, got '1' (str)",
        ),
        (
            lambda: rope_inv_freq(
                8, scaling="yarn", factor=2.0, original_max_position_embeddings=16, attention_factor=-1.0
            ),
            ValueError,
            "attention_factor must be positive and finite, got -1.0",
        ),
        (
            lambda: rope_inv_freq(
                8, scaling="yarn", factor=2.0, original_max_position_embeddings=16, beta_fast=0
            ),
            ValueError,
            "beta_fast must be positive and finite, got 0",
        ),
        (
            lambda: rope_inv_freq(
                8,
                scaling="yarn",
                factor=2.0,
                original_max_position_embeddings=16,
                beta_fast=1.0,
                beta_slow=2.0,
            ),
            ValueError,
            "yarn's beta_fast must exceed beta_slow, got beta_fast=1.0 and beta_slow=2.0",
        ),
        (
            lambda: rope_inv_freq(8, scaling="linear", factor=None),
            ValueError,
            "scaling 'linear' needs a value for factor, got None",
        ),
        (
            lambda: rope_inv_freq(8, scaling="linear", factor="2"),
            TypeError,
            "factor must be a real number, got '2'",
        ),
        (
            lambda: rope_inv_freq(
                8, scaling="llama3", factor=2.0, original_max_position_embeddings=16, low_freq_factor=0
            ),
            ValueError,
            "low_freq_factor must be positive and finite, got 0",
        ),
        (
            lambda: rope_inv_freq(
                8, scaling="llama3", factor=2.0, original_max_position_embeddings=16, low_freq_factor=8.0
            ),
            ValueError,
            "llama3's high_freq_factor must exceed low_freq_factor, got high_freq_factor=4.0 and low_freq_factor=8.0",
        ),
        (
            lambda: rope_inv_freq(
                8, scaling="yarn", factor=2.0, original_max_position_embeddings=16, truncate=1
            ),
            TypeError,
            "truncate must be True or False, got 1",
        ),
        (
            lambda: apply_rope(torch.zeros(8), torch.zeros(8, 4), torch.zeros(8, 4)),
            ValueError,
            "x must be [..., s, d] with at least 2 dimensions, got shape (8,)",
        ),
        (
            lambda: apply_rope(torch.zeros(2, 1, 4, 8), torch.zeros(3, 4, 4), torch.zeros(3, 4, 4)),
            ValueError,
            "cos and sin of shape (3, 4, 4) have batch 3, but x of shape (2, 1, 4, 8) has batch 2",
        ),
    ],
)
def test_bad_scaling_arguments_and_shapes_are_refused_naming_the_value(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_float_tensors_are_refused_naming_the_dtype(dtype):
    # apply_rope on int64 used to truncate every product to 0 and return zeros
    cos, sin = rope_cos_sin(4, rope_inv_freq(8)[0])
    x = torch.ones(1, 1, 4, 8).to(dtype)
    with pytest.raises(TypeError, match=f"x must be a floating-point tensor, got dtype {dtype}"):
        apply_rope(x, cos, sin)
    with pytest.raises(TypeError, match=f"cos must be a floating-point tensor, got dtype {dtype}"):
        apply_rope(torch.ones(1, 1, 4, 8), cos.to(dtype), sin)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.uint8])
def test_rope_cos_sin_refuses_a_non_float_output_dtype(dtype):
    with pytest.raises(TypeError, match=f"dtype must be a floating-point torch.dtype, got {dtype}"):
        rope_cos_sin(4, rope_inv_freq(8)[0], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_rope_cos_sin_refuses_non_float_frequencies_naming_the_dtype(dtype):
    # a complex inv_freq used to lose its imaginary part with only a warning
    with pytest.raises(TypeError, match=f"inv_freq must be a floating-point tensor, got dtype {dtype}"):
        rope_cos_sin(4, torch.ones(4).to(dtype))


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (float("nan"), ValueError, "attention_factor must be positive and finite, got nan"),
        (0.0, ValueError, "attention_factor must be positive and finite, got 0.0"),
        ("2", TypeError, "attention_factor must be a real number, got '2'"),
    ],
)
def test_rope_cos_sin_refuses_a_bad_attention_factor_naming_it(value, error, message):
    with pytest.raises(error, match=re.escape(message)):
        rope_cos_sin(4, rope_inv_freq(8)[0], attention_factor=value)


def test_yarn_refuses_a_factor_below_one():
    with pytest.raises(
        ValueError, match="yarn's factor is the context extension and must be at least 1, got factor=0.5"
    ):
        rope_inv_freq(8, scaling="yarn", factor=0.5, original_max_position_embeddings=64)


@pytest.mark.parametrize("backend", ["auto", "eager", "native", "reference", "cpu"])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_every_cpu_backend_gives_the_reference_result_in_float32(backend, layout):
    x = torch.randn(2, 3, 7, 32, generator=torch.Generator().manual_seed(0))
    cos, sin = rope_cos_sin(torch.arange(7) * 1000, rope_inv_freq(24)[0])
    expected = apply_rope(x, cos, sin, layout=layout, rotary_dim=24, backend="eager")
    got = apply_rope(x, cos, sin, layout=layout, rotary_dim=24, backend=backend)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)  # the C kernel: bit-identical


def test_cos_and_sin_on_another_device_than_x_are_refused_naming_both():
    x = torch.zeros(1, 1, 4, 8)
    table = torch.zeros(4, 4, device="meta")
    with pytest.raises(ValueError, match="cos is on meta and x on cpu; they must share a device"):
        apply_rope(x, table, torch.zeros(4, 4))
    with pytest.raises(ValueError, match="sin is on meta and x on cpu; they must share a device"):
        apply_rope(x, torch.zeros(4, 4), table)


def test_per_head_tables_rotate_each_head_by_its_own_angles_on_every_backend_that_takes_them():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    angles = torch.rand(1, 3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = apply_rope(x, angles.cos(), angles.sin(), layout="interleaved")  # auto: eager for per-head tables
    for head in range(3):
        expected = apply_rope(x[:, head], angles[0, head].cos(), angles[0, head].sin(), layout="interleaved")
        torch.testing.assert_close(got[:, head], expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="per-head tables"):
        apply_rope(x.float(), angles.cos().float(), angles.sin().float(), backend="native")
    with pytest.raises(
        ValueError, match=r"per-head cos and sin of shape \(1, 2, 5, 4\) must have batch and heads 1"
    ):
        apply_rope(x, angles[:, :2].cos(), angles[:, :2].sin())
