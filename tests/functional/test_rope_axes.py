"""RoPE on several axes in posenc.functional: frequencies per axis, the axis of each frequency, the tables."""

from __future__ import annotations

import math
import re

import pytest
import torch

from posenc.functional.rope import (
    apply_rope,
    rope_axial_frequencies,
    rope_cos_sin,
    rope_inv_freq,
    rope_section_axes,
)
from tests.reference.axes_loop import axial_rope_vector, mrope_axis, mrope_vector


@pytest.mark.parametrize("widths", [(16, 56, 56), (32, 32), (8,), (2, 6, 4)])
def test_axial_frequencies_are_each_axis_own_spectrum_in_axis_order(widths):
    inv_freq, axis = rope_axial_frequencies(widths, base=10000.0)
    expected = [10000.0 ** (-2 * i / w) for w in widths for i in range(w // 2)]
    assert inv_freq.dtype == torch.float64 and axis.dtype == torch.int64
    torch.testing.assert_close(inv_freq, torch.tensor(expected, dtype=torch.float64), rtol=1e-15, atol=0)
    assert axis.tolist() == [a for a, w in enumerate(widths) for _ in range(w // 2)]


@pytest.mark.parametrize(
    ("sections", "layout"),
    [
        ((16, 24, 24), "contiguous"),
        ((24, 20, 20), "interleaved"),
        ((3, 2, 2), "interleaved"),
        ((5, 3), "contiguous"),
    ],
)
def test_section_axes_follow_qwen2_vl_runs_and_qwen3_vl_interleaving(sections, layout):
    axis = rope_section_axes(sections, layout=layout)
    assert axis.tolist() == [mrope_axis(k, list(sections), layout) for k in range(sum(sections))]
    assert [int((axis == a).sum()) for a in range(len(sections))] == list(sections)


def test_qwen3_vl_interleaving_of_its_default_sections():
    # transformers' apply_interleaved_mrope with mrope_section [24, 20, 20]: h at 1, 4, …, 58; w at 2, 5, …, 59
    axis = rope_section_axes((24, 20, 20), layout="interleaved").tolist()
    assert [k for k, a in enumerate(axis) if a == 1] == list(range(1, 60, 3))
    assert [k for k, a in enumerate(axis) if a == 2] == list(range(2, 60, 3))
    assert axis[60:] == [0, 0, 0, 0]


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_axial_rotation_matches_the_float64_loop(layout, dtype):
    widths = [8, 12, 12]
    inv_freq, axis = rope_axial_frequencies(widths)
    coords = torch.tensor([[0, 0, 0], [1, 2, 3], [7, 40, 5], [2, 500, 1000]]).to(dtype)
    if dtype == torch.float64:
        coords = coords * 0.37 - 3.1  # fractional and negative coordinates, used as given
    cos, sin = rope_cos_sin(coords, inv_freq, axis=axis, dtype=torch.float64)  # [s, 16]
    x = torch.randn(4, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = apply_rope(x, cos, sin, layout=layout, backend="eager")
    expected = [axial_rope_vector(x[t].tolist(), coords[t].tolist(), widths, layout=layout) for t in range(4)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("sections", "layout"), [((4, 6, 6), "contiguous"), ((6, 5, 5), "interleaved")])
def test_sectioned_rotation_matches_the_float64_loop(sections, layout):
    r = 2 * sum(sections)
    inv_freq, _ = rope_inv_freq(r)
    axis = rope_section_axes(sections, layout=layout)
    coords = torch.tensor([[3, 3, 3], [10, 4, 9], [10, 5, 0]])
    cos, sin = rope_cos_sin(coords, inv_freq, axis=axis, dtype=torch.float64)
    x = torch.randn(3, r, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = apply_rope(x, cos, sin, layout="half", backend="eager")
    expected = [
        mrope_vector(x[t].tolist(), coords[t].tolist(), list(sections), layout=layout) for t in range(3)
    ]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


def test_integer_coordinates_are_exact_at_a_million_positions():
    # the reduction of posenc.functional.angles, per axis: float32 within one rounding of the exact value
    inv_freq, axis = rope_axial_frequencies((16, 16))
    coords = torch.tensor([[2**20, 3], [5, 2**20 + 1], [2**26, 2**26]])
    cos, sin = rope_cos_sin(coords, inv_freq, axis=axis, dtype=torch.float32)
    mp = pytest.importorskip("mpmath")
    mp.mp.prec = 200
    exact = [
        [
            float(mp.cos(mp.mpf(coords[t, a].item()) * mp.mpf(f)))
            for f, a in zip(inv_freq.tolist(), axis.tolist(), strict=True)
        ]
        for t in range(3)
    ]
    error = (cos.double() - torch.tensor(exact, dtype=torch.float64)).abs().max()
    assert error <= 2**-24  # half a float32 ulp of values ≤ 1, plus the rounding of the exact float64


def test_a_one_axis_table_equals_the_one_dimensional_table():
    inv_freq, _ = rope_inv_freq(32)
    positions = torch.tensor([0, 5, 1000, 2**20])
    one_axis = rope_cos_sin(positions[:, None], inv_freq, axis=torch.zeros(16, dtype=torch.long))
    assert all(torch.equal(a, b) for a, b in zip(one_axis, rope_cos_sin(positions, inv_freq), strict=True))


def test_axial_logits_depend_only_on_the_offset_along_each_axis():
    inv_freq, axis = rope_axial_frequencies((16, 16))
    generator = torch.Generator().manual_seed(2)
    q, k = (
        torch.randn(32, dtype=torch.float64, generator=generator),
        torch.randn(32, dtype=torch.float64, generator=generator),
    )

    def logit(q_at, k_at):
        coords = torch.tensor([q_at, k_at])
        cos, sin = rope_cos_sin(coords, inv_freq, axis=axis, dtype=torch.float64)
        rq, rk = apply_rope(torch.stack((q, k)), cos, sin, backend="eager")
        return float(rq @ rk)

    base = logit((3, 7), (1, 2))
    assert math.isclose(logit((103, 7), (101, 2)), base, rel_tol=0, abs_tol=1e-11)  # shifted along axis 0
    assert math.isclose(logit((3, 57), (1, 52)), base, rel_tol=0, abs_tol=1e-11)  # along axis 1
    assert abs(logit((3, 7), (2, 1)) - base) > 1e-3  # another offset: another logit


def _axial_table(positions, widths):
    inv_freq, axis = rope_axial_frequencies(widths)
    return rope_cos_sin(positions, inv_freq, axis=axis)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: rope_axial_frequencies((16, 15)), ValueError, "axes[1] must be even, got 15"),
        (lambda: rope_axial_frequencies((16, 0)), ValueError, "axes[1] must be positive, got 0"),
        (lambda: rope_axial_frequencies(()), ValueError, "axes must hold at least one value"),
        (lambda: rope_axial_frequencies("16"), TypeError, "axes must be a sequence of positive ints"),
        (lambda: rope_section_axes((16, -2)), ValueError, "sections[1] must be positive, got -2"),
        (lambda: rope_section_axes((16, 8), layout="zigzag"), ValueError, "layout must be one of"),
        (
            lambda: rope_section_axes((1, 4, 4), layout="interleaved"),
            ValueError,
            "interleaved sections (1, 4, 4) cannot give axis 1 4 pairs",
        ),
        (
            lambda: _axial_table(torch.zeros(5, 2), (8, 8, 8)),
            ValueError,
            "positions must be [..., s, 3] with one column per coordinate axis (3), got shape (5, 2)",
        ),
        (
            lambda: _axial_table(torch.tensor([[0.0, float("nan")]]), (8, 8)),
            ValueError,
            "positions must be finite coordinates, got nan",
        ),
        (
            lambda: _axial_table(torch.zeros(3, 2, dtype=torch.bool), (8, 8)),
            TypeError,
            "positions must hold integer or real coordinates, got dtype torch.bool",
        ),
        (
            lambda: rope_cos_sin(torch.zeros(3, 2), rope_inv_freq(16)[0], axis=torch.tensor([0, 1])),
            ValueError,
            "axis must name the axis of each of the 8 frequencies, got 2",
        ),
    ],
)
def test_bad_axes_and_coordinates_are_refused_naming_the_value(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
