"""RoPE's frequency schemes: each checks its own arguments and gives the functional spectrum."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import posenc
from posenc.encodings.rope_schemes import Axial, Mixed, OneAxis, Sections, rotary_scheme
from posenc.functional.rope import (
    rope_axial_frequencies,
    rope_inv_freq,
    rope_mixed_frequencies,
    rope_section_axes,
)

LONGROPE = {
    "short_factor": [1.0, 1.1, 1.3, 1.7],
    "long_factor": [1.0, 2.0, 5.0, 9.0],
    "original_max_position_embeddings": 16,
    "factor": 4.0,
}
SCALED = [
    (None, {}),
    ("linear", {"factor": 4.0}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}),
    (
        "llama3",
        {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    ("longrope", LONGROPE | {"seq_len": 100}),
    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 16}),
]


@pytest.mark.parametrize(("scaling", "args"), SCALED)
def test_one_axis_spectrum_is_the_functional_one(scaling, args):
    scheme = OneAxis(8, 500.0, scaling, args)
    inv_freq, axis, factor = scheme.spectrum()
    expected, expected_factor = rope_inv_freq(8, base=500.0, scaling=scaling, **args)
    assert torch.equal(inv_freq, expected) and inv_freq.dtype == torch.float64
    assert axis is None and factor == expected_factor and scheme.position_axes == 1


def test_dynamic_ntk_follows_the_length_past_the_original():
    args = {"factor": 2.0, "original_max_position_embeddings": 16}
    scheme = OneAxis(8, scaling="dynamic", scaling_args=args)
    assert scheme.dynamic and scheme.follows_length and scheme.original_length == 16
    assert not scheme.switches_factors and scheme.long_spectrum() is None
    for length in (8, 16, 40):
        expected, _ = rope_inv_freq(8, scaling="dynamic", seq_len=length, **args)
        assert torch.equal(scheme.spectrum_at(length), expected)


def test_longrope_switches_to_its_long_factors_past_the_original_length():
    scheme = OneAxis(8, scaling="longrope", scaling_args=LONGROPE)
    assert scheme.switches_factors and scheme.follows_length and not scheme.dynamic
    short, _ = rope_inv_freq(8, scaling="longrope", seq_len=16, **LONGROPE)
    long, _ = rope_inv_freq(8, scaling="longrope", seq_len=17, **LONGROPE)
    assert torch.equal(scheme.spectrum()[0], short) and torch.equal(scheme.long_spectrum(), long)
    assert torch.equal(scheme.spectrum_at(16), short) and torch.equal(scheme.spectrum_at(17), long)
    fixed = OneAxis(8, scaling="longrope", scaling_args=LONGROPE | {"seq_len": 100})
    assert not fixed.follows_length and fixed.original_length is None and fixed.long_spectrum() is None


def test_an_unscaled_line_follows_no_length():
    scheme = OneAxis(16)
    assert not scheme.follows_length and scheme.original_length is None
    assert torch.equal(scheme.spectrum_at(10**6), scheme.spectrum()[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rotary_dim": 7}, "rotary_dim must be even, got 7"),
        ({"rotary_dim": 8, "base": -1.0}, "base must be"),
        (
            {"rotary_dim": 8, "scaling": "yarn"},
            "scaling 'yarn' needs factor, original_max_position_embeddings",
        ),
        (
            {"rotary_dim": 8, "scaling": "linear", "scaling_args": {"factor": 2.0, "alpha": 1.0}},
            "does not take alpha",
        ),
        (
            {"rotary_dim": 8, "scaling_args": {"factor": 2.0}},
            "scaling arguments given without a scaling: factor",
        ),
        (
            {"rotary_dim": 8, "dynamic_length": "max"},
            "dynamic_length must be one of 'call', 'longest'; got 'max'",
        ),
        ({"rotary_dim": 8, "dynamic_length": "longest"}, "dynamic_length='longest' is for scaling='dynamic'"),
        (
            {"rotary_dim": 8, "longrope_switch": "rerotate"},
            "longrope_switch='rerotate' is for scaling='longrope'",
        ),
        (
            {"rotary_dim": 8, "scaling": "dynamic", "scaling_args": {"factor": 2.0, "seq_len": 256}},
            "scaling='dynamic' follows the length of each call; seq_len=256",
        ),
    ],
)
def test_one_axis_names_what_does_not_fit(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        OneAxis(**kwargs)


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_sections_split_the_one_axis_spectrum(layout):
    scheme = Sections(16, 1000.0, "linear", {"factor": 2.0}, sections=(4, 2, 2), section_layout=layout)
    inv_freq, axis, factor = scheme.spectrum()
    expected, expected_factor = rope_inv_freq(16, base=1000.0, scaling="linear", factor=2.0)
    assert torch.equal(inv_freq, expected) and factor == expected_factor
    assert torch.equal(axis, rope_section_axes((4, 2, 2), layout=layout))
    assert scheme.position_axes == 3 and scheme.axes is None


def test_sections_keep_longrope_switching():
    scheme = Sections(8, scaling="longrope", scaling_args=LONGROPE, sections=(2, 1, 1))
    assert scheme.switches_factors and scheme.original_length == 16
    assert torch.equal(
        scheme.long_spectrum(), rope_inv_freq(8, scaling="longrope", seq_len=17, **LONGROPE)[0]
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sections": (2, 2, 2)}, "sections (2, 2, 2) hold 6 pairs, but rotary_dim=16 has 8"),
        ({"sections": (4, 0, 4)}, "sections[1] must be"),
        ({"sections": (4, 4), "section_layout": "zigzag"}, "section_layout must be one of"),
        (
            {"sections": (2, 1, 5), "section_layout": "interleaved"},
            "interleaved sections (2, 1, 5) cannot give axis 2",
        ),
        (
            {
                "sections": (4, 4),
                "scaling": "dynamic",
                "scaling_args": {"factor": 2.0, "original_max_position_embeddings": 8},
            },
            "scaling='dynamic' follows the longest 1-D position; it does not apply on axes",
        ),
    ],
)
def test_sections_name_what_does_not_fit(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Sections(**({"rotary_dim": 16} | kwargs))


def test_axial_spectrum_is_the_functional_one():
    scheme = Axial((4, 6, 6), base=100.0)
    inv_freq, axis, factor = scheme.spectrum()
    expected, expected_axis = rope_axial_frequencies((4, 6, 6), base=100.0)
    assert torch.equal(inv_freq, expected) and torch.equal(axis, expected_axis) and factor == 1.0
    assert scheme.rotary_dim == 16 and scheme.axes == (4, 6, 6) and scheme.position_axes == 3
    assert not scheme.follows_length and scheme.scaling is None and dict(scheme.scaling_args) == {}


def test_axial_splits_equally_or_names_the_width():
    assert Axial.equal(2, 16).widths == (8, 8)
    with pytest.raises(ValueError, match="rotary_dim=16 does not split into 3 even axis widths"):
        Axial.equal(3, 16)
    with pytest.raises(ValueError, match=re.escape("axes[1] must be even, got 7")):
        Axial((8, 7))


def test_mixed_draws_the_functional_initialisation():
    scheme = Mixed(16, n_heads=4, axes=2)
    drawn = scheme.initial_frequencies(torch.Generator().manual_seed(3))
    assert torch.equal(
        drawn, rope_mixed_frequencies(4, 16, 2, base=10.0, generator=torch.Generator().manual_seed(3))
    )
    inv_freq, axis, factor = scheme.spectrum()
    assert torch.equal(inv_freq, rope_inv_freq(16, base=10.0)[0]) and axis is None and factor == 1.0
    assert scheme.learned and scheme.position_axes == 2 and scheme.n_heads == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"rotary_dim": 10, "n_heads": 2, "axes": 2},
            "RoPE-Mixed splits rotary_dim=10 into 2·axes = 4 groups",
        ),
        ({"rotary_dim": 16, "n_heads": 0}, "n_heads must be"),
        ({"rotary_dim": 16, "n_heads": 2, "axes": 0}, "axes must be"),
    ],
)
def test_mixed_names_what_does_not_fit(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Mixed(**kwargs)


def test_a_scheme_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        OneAxis(8).base = 1.0


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({}, OneAxis),
        ({"scaling": "linear", "scaling_args": {"factor": 2.0}}, OneAxis),
        ({"sections": (2, 3, 3)}, Sections),
        ({"axes": 2}, Axial),
        ({"axes": (4, 12)}, Axial),
        ({"axes": 2, "mixed": True, "n_heads": 2}, Mixed),
    ],
)
def test_the_encoding_takes_its_frequencies_from_its_scheme(kwargs, kind):
    rope = posenc.build("rope", d_head=16, **kwargs)
    scheme = rotary_scheme(16, **kwargs)
    assert type(rope.scheme) is kind and type(scheme) is kind
    inv_freq, axis, factor = scheme.spectrum()
    assert torch.equal(rope.inv_freq, inv_freq) and rope.attention_factor == factor
    assert (rope.frequency_axis is None and axis is None) or torch.equal(rope.frequency_axis, axis)
    assert rope.position_space.axes == scheme.position_axes and rope.rotary_dim == scheme.rotary_dim


def test_axes_refuse_scaling_arguments_without_a_scaling():
    with pytest.raises(ValueError, match="scaling arguments given without a scaling: factor"):
        posenc.build("rope", d_head=16, axes=2, scaling_args={"factor": 2.0})
