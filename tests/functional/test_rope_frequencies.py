"""Each axis's RoPE frequencies as data (AxisFrequencies, axes_spectrum) and exact angles of float coordinates."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc
from posenc.functional.angles import reduced_float_angles, split_frequencies
from posenc.functional.rope import AxisFrequencies, axes_spectrum, rope_axial_frequencies
from tests.reference.axes_loop import per_axis_rope_vector


def test_a_base_gives_the_base_spectrum_of_the_axis_width():
    theta, factor = AxisFrequencies(8, base=100.0).spectrum()
    expected = torch.tensor([100.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(theta, expected, rtol=1e-15, atol=0)
    assert factor == 1.0


def test_periods_are_geometric_wavelengths_from_min_to_max():
    theta, _ = AxisFrequencies(8, periods=(2.0, 250.0)).spectrum()
    periods = [2.0 * (250.0 / 2.0) ** (i / 3) for i in range(4)]
    expected = torch.tensor([2 * math.pi / p for p in periods], dtype=torch.float64)
    torch.testing.assert_close(theta, expected, rtol=1e-14, atol=0)


def test_an_explicit_vector_is_used_as_given_times_its_scale():
    theta, _ = AxisFrequencies(6, frequencies=[3.0, 0.5, 1e-3], scale=2.0).spectrum()
    assert theta.tolist() == [6.0, 1.0, 2e-3]


def test_a_scaling_applies_per_axis():
    scaled, _ = AxisFrequencies(8, base=10000.0, scaling="ntk", scaling_args={"factor": 2.0}).spectrum()
    plain, _ = AxisFrequencies(8, base=10000.0 * 2.0 ** (8 / 6)).spectrum()
    torch.testing.assert_close(scaled, plain, rtol=1e-14, atol=0)


def test_the_axial_preset_is_the_per_axis_scheme_with_one_base():
    rope = posenc.build("rope", d_head=24, axes=(8, 16), base=100.0)
    per_axis = posenc.build(
        "rope", d_head=24, frequencies=[AxisFrequencies(8, base=100.0), AxisFrequencies(16, base=100.0)]
    )
    inv_freq, axis = rope_axial_frequencies((8, 16), base=100.0)
    assert torch.equal(rope.inv_freq, per_axis.inv_freq) and torch.equal(rope.inv_freq, inv_freq)
    assert torch.equal(rope.frequency_axis, axis) and torch.equal(per_axis.frequency_axis, axis)


def test_the_frequencies_layout_interleaves_the_axes_per_frequency():
    axes = [AxisFrequencies(4, frequencies=[1.0, 2.0]), AxisFrequencies(4, frequencies=[3.0, 4.0])]
    theta, axis, _ = axes_spectrum(axes, layout="frequencies")
    assert theta.tolist() == [1.0, 3.0, 2.0, 4.0] and axis.tolist() == [0, 1, 0, 1]
    theta, axis, _ = axes_spectrum(axes, layout="axes")
    assert theta.tolist() == [1.0, 2.0, 3.0, 4.0] and axis.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("unrotated", ["last", "first"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("pair_layout", ["axes", "frequencies"])
def test_per_axis_frequencies_rotate_as_the_float64_loop(unrotated, layout, pair_layout):
    axes = [AxisFrequencies(4, periods=(1.0, 7.0)), AxisFrequencies(4, frequencies=[0.3, 2.5])]
    rope = posenc.build(
        "rope", d_head=10, frequencies=axes, pair_layout=pair_layout, unrotated=unrotated, layout=layout
    )
    thetas = [[2 * math.pi / 1.0, 2 * math.pi / 7.0], [0.3, 2.5]]  # from the periods and the vector
    x = torch.randn(2, 5, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    coordinates = torch.rand(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 4 - 2
    got, _ = rope.rotate(x[None], x[None], coordinates, coordinates)
    kept = 2 if unrotated == "first" else 0
    expected = torch.tensor(
        [
            [
                per_axis_rope_vector(
                    x[h, s].tolist(), coordinates[s].tolist(), thetas, pair_layout, layout, kept
                )
                for s in range(5)
            ]
            for h in range(2)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(got[0], expected, rtol=0, atol=1e-13)


def test_float_coordinates_get_angles_as_exact_as_integers():
    # coordinates up to 1e6 in float64: the angle of the float64 value itself, to a few 1e-16
    x = torch.tensor([1e6 + 0.1, -123456.789, 0.3, 2.0**26 + 0.5, 1e-9], dtype=torch.float64)
    omega = torch.tensor([1.0, 0.01234, 2 * math.pi, 1.5707963267948966e4 / 1e4], dtype=torch.float64)
    angle = reduced_float_angles(x[:, None].expand(-1, 4), split_frequencies(omega))
    mpmath.mp.dps = 50
    for i in range(x.shape[0]):
        for k in range(4):
            exact = mpmath.mpf(float(x[i])) * mpmath.mpf(float(omega[k]))
            assert abs(math.sin(float(angle[i, k])) - float(mpmath.sin(exact))) < 2e-15
            assert abs(math.cos(float(angle[i, k])) - float(mpmath.cos(exact))) < 2e-15
    assert float(angle.abs().max()) <= math.pi + 1e-6


def test_a_float_coordinate_equal_to_an_integer_turns_exactly_as_the_integer():
    rope = posenc.build("rope", d_head=16, axes=(8, 8))
    integers = torch.tensor([[2**24 + 3, 5], [123457, 2**20]])
    cos_i, sin_i = rope.cos_sin(integers)
    cos_f, sin_f = rope.cos_sin(integers.double())
    torch.testing.assert_close(cos_f, cos_i, rtol=0, atol=4e-16)
    torch.testing.assert_close(sin_f, sin_i, rtol=0, atol=4e-16)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"frequencies": [1.0, 2.0]}, r"width/2 = 3"),
        ({"frequencies": [1.0, float("nan"), 2.0]}, r"frequencies\[1\] must be positive and finite, got nan"),
        ({"frequencies": [1.0, 0.0, 2.0]}, r"frequencies\[1\] must be positive and finite, got 0.0"),
        ({"frequencies": [1.0, -2.0, 2.0]}, r"frequencies\[1\] .* got -2.0"),
        ({"frequencies": [1.0, float("inf"), 2.0]}, r"frequencies\[1\] .* got inf"),
        ({"periods": (10.0, 10.0)}, r"min_period < max_period, got \(10.0, 10.0\)"),
        ({"periods": (10.0, 2.0)}, r"min_period < max_period, got \(10.0, 2.0\)"),
        ({"periods": (0.0, 2.0)}, r"min_period must be positive and finite, got 0.0"),
        ({"periods": (1.0, 2.0), "base": 10.0}, r"one of base .* got base/scaling, periods"),
        ({"base": -1.0}, r"base must be positive and finite, got -1.0"),
    ],
)
def test_bad_frequencies_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AxisFrequencies(6, **kwargs)


def test_frequencies_refuse_arguments_that_set_them_again():
    with pytest.raises(ValueError, match="base would set them again"):
        posenc.build("rope", d_head=8, frequencies=[AxisFrequencies(8)], base=10.0)
    with pytest.raises(ValueError, match="same width"):
        posenc.build(
            "rope", d_head=12, frequencies=[AxisFrequencies(4), AxisFrequencies(8)], pair_layout="frequencies"
        )
    with pytest.raises(ValueError, match="at most d_head=8"):
        posenc.build("rope", d_head=8, frequencies=[AxisFrequencies(8), AxisFrequencies(4)])
    with pytest.raises(ValueError, match="unrotated must be one of"):
        posenc.build("rope", d_head=8, unrotated="middle")


@settings(max_examples=20, deadline=None)
@given(
    shift=st.tuples(*(st.floats(-50.0, 50.0, allow_nan=False) for _ in range(3))),
    seed=st.integers(0, 2**16),
)
def test_logits_of_per_axis_frequencies_depend_only_on_the_float_offset(shift, seed):
    generator = torch.Generator().manual_seed(seed)
    rope = posenc.build("ltx", d_head=20)
    q = torch.randn(1, 1, 6, 20, dtype=torch.float64, generator=generator)
    k = torch.randn(1, 1, 6, 20, dtype=torch.float64, generator=generator)
    coordinates = torch.rand(6, 3, dtype=torch.float64, generator=generator) * 2 - 1
    moved = coordinates + torch.tensor(shift, dtype=torch.float64)
    logits = [(a @ b.transpose(-1, -2)) for a, b in (rope.rotate(q, k, c, c) for c in (coordinates, moved))]
    # the moved coordinates are rounded float64 values: ω·ulp(x) ≈ 15708·2^-46 ≈ 2e-10 rad at most
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-9)


def test_a_half_precision_module_keeps_its_explicit_frequencies_exact():
    rope = posenc.build("ltx", d_head=20)
    exact = rope.scheme.spectrum()[0]
    rope.to(torch.bfloat16)
    assert rope.inv_freq_pieces.dtype == torch.float64
    assert torch.equal(rope.inv_freq, exact)
