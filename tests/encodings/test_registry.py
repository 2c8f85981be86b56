"""The registry and the one interface every encoding implements."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encodings import KINDS, PositionalEncoding
from posenc.encodings.base import trainable_parameters
from tests.conftest import ENCODING_KWARGS


def test_available_lists_the_foundation_encodings():
    assert {"sinusoidal", "learned", "nope"} <= set(posenc.available())
    assert posenc.available() == sorted(posenc.available())


def test_every_registered_encoding_builds_from_its_test_arguments():
    for name in posenc.available():
        assert isinstance(posenc.build(name, **ENCODING_KWARGS[name]), PositionalEncoding), name


@pytest.mark.parametrize("name", posenc.available())
def test_build_returns_a_positional_encoding_with_a_known_kind(name):
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    assert isinstance(encoding, PositionalEncoding)
    assert encoding.kind in KINDS


@pytest.mark.parametrize("name", posenc.available())
def test_hooks_that_do_not_apply_are_identities_or_none(name):
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    q, k = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    positions = torch.arange(10)
    if encoding.kind != "rotary":
        q_out, k_out = encoding.rotate(q, k, positions, positions)
        assert q_out is q and k_out is k
    if encoding.kind != "bias":
        assert encoding.bias(positions, positions) is None
        assert encoding.score_mod() is None
    if encoding.kind != "additive":
        x = torch.randn(2, 10, 16)
        assert encoding.embed(x) is x


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize("name", posenc.available())
def test_hooks_refuse_non_float_tensors_naming_the_dtype(name, dtype):
    # integer inputs used to come back as integers (embed) or as zeros (rotate): a silent wrong answer
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    with pytest.raises(TypeError, match=f"x must be a floating-point tensor, got dtype {dtype}"):
        encoding.embed(torch.ones(2, 10, 16).to(dtype))
    with pytest.raises(TypeError, match=f"q must be a floating-point tensor, got dtype {dtype}"):
        encoding.rotate(torch.ones(2, 4, 10, 16).to(dtype), torch.ones(2, 4, 10, 16))


@pytest.mark.parametrize("name", posenc.available())
def test_parameter_formula_matches_the_module(name):
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    counted = sum(p.numel() for p in encoding.parameters())
    kwargs = ENCODING_KWARGS[name]
    assert encoding.count_parameters(kwargs.get("max_len", 0), kwargs.get("d_model", 0), 4) == counted


@pytest.mark.parametrize("name", posenc.available())
def test_parameters_at_size_zero_are_the_instances_own(name):
    # count_parameters reads a size of 0 as the instance's own: learned, T5 and Swin counted 0 rows or heads
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    assert encoding.count_parameters(0, 0, 0) == trainable_parameters(encoding)


def test_unknown_encoding_names_list_the_valid_ones():
    valid = ", ".join(posenc.available())
    assert valid.startswith("alibi, ") and "learned" in valid and "t5" in valid
    with pytest.raises(ValueError, match=f"unknown encoding 'sinusoid'; available: {valid}"):
        posenc.build("sinusoid")


def test_arguments_an_encoding_does_not_take_are_named():
    with pytest.raises(ValueError, match="encoding 'nope' does not take d_model; it takes no arguments"):
        posenc.build("nope", d_model=8)
    with pytest.raises(
        ValueError, match="encoding 'sinusoidal' does not take max_len; it takes d_model, base, mode"
    ):
        posenc.build("sinusoidal", d_model=8, max_len=3)
