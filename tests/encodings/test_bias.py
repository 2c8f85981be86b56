"""The bias encodings (ALiBi, T5, Swin) as modules: their hooks and the inputs they refuse."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
import posenc.model
from posenc.encodings.views import translations
from tests.conftest import ENCODING_KWARGS


@pytest.mark.parametrize(
    ("build", "positions", "message"),
    [
        (
            lambda: posenc.build("t5", n_heads=2),
            (torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(1, 2, 3, dtype=torch.long)),
            "q_positions must be [n] or [b, n], got shape (1, 2, 3)",
        ),
        (
            lambda: posenc.build("t5", n_heads=2),
            (torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long)),
            "q_positions and k_positions must have the same batch size, got 2 and 3",
        ),
        (
            lambda: posenc.build("swin", n_heads=2, window=3),
            (torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long)),
            "q_positions and k_positions must have the same batch size, got 2 and 3",
        ),
        (
            lambda: posenc.build("alibi", n_heads=2),
            (torch.zeros(2, 1, 3, dtype=torch.long), torch.arange(3)),
            "q_positions must be [n] or [b, n], got shape (2, 1, 3)",
        ),
    ],
)
def test_positions_a_bias_cannot_use_are_refused_naming_them(build, positions, message):
    # a 3-d position tensor used to broadcast into a bias of the wrong rank without a word
    with pytest.raises(ValueError, match=re.escape(message)):
        build().bias(*positions)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_distance": -4}, "max_distance must be positive, got -4"),
        ({"max_distance": 0}, "max_distance must be positive, got 0"),
        ({"num_buckets": -2}, "num_buckets must be positive, got -2"),
    ],
)
def test_t5_refuses_bucket_settings_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("t5", n_heads=2, **kwargs)


@pytest.mark.parametrize("name", ["alibi", "t5", "swin"])
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_positions_whose_distance_overflows_int64_are_refused_on_every_backend(name, backend):
    # on flex (and for T5 everywhere) 2^63 − 1 and −2^63 used to give the bias of distance +1
    model = posenc.model.TransformerLM(10, d_model=16, n_heads=2, n_layers=1, encoding=name, backend=backend)
    positions = torch.tensor([2**63 - 2, 2**63 - 1, -(2**63)])
    with pytest.raises(ValueError, match=re.escape("must lie within ±2^62 so that distances fit in int64")):
        model(torch.zeros(1, 3, dtype=torch.long), positions=positions)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_score_mod_refuses_positions_whose_distance_overflows_int64(name):
    encoding = posenc.build(name, n_heads=2)
    with pytest.raises(ValueError, match=re.escape("k_positions must lie within ±2^62")):
        encoding.score_mod(q_positions=torch.tensor([0]), k_positions=torch.tensor([-(2**63)]))


def test_score_mod_takes_both_position_tensors_or_neither():
    with pytest.raises(ValueError, match="q_positions and k_positions together"):
        posenc.build("alibi", n_heads=2).score_mod(q_positions=torch.arange(3))


@pytest.mark.parametrize("window", [2, (2, 2), (1, 5), (3, 2)])
def test_small_swin_windows_offer_translations_inside_the_window(window):
    # window 2 used to offer shift 1, which wraps a row, and properties() crashed on it
    swin = posenc.build("swin", n_heads=2, window=window)
    positions, shifts = translations(swin, 8)
    rows, cols = swin.window_shape
    assert shifts
    for shift in shifts:
        moved = positions + shift
        assert (moved // cols == positions // cols + shift // cols).all()  # no row wraps
        assert int(moved.max()) < rows * cols


def test_a_one_token_swin_window_has_no_translation():
    with pytest.raises(ValueError, match="a 1×1 Swin window leaves no room to shift a token"):
        translations(posenc.build("swin", n_heads=2, window=1), 8)


def _score_mod_at_offsets(encoding, **offsets) -> torch.Tensor:
    b = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    h = torch.arange(4).view(1, 4, 1, 1)
    q_idx, kv_idx = torch.arange(3).view(1, 1, 3, 1), torch.arange(5).view(1, 1, 1, 5)
    return encoding.score_mod(**offsets)(torch.zeros(1, 4, 3, 5), b, h, q_idx, kv_idx)


@pytest.mark.parametrize("name", ["alibi", "t5", "swin", "kerple"])
@pytest.mark.parametrize("argument", ["q_offset", "kv_offset"])
def test_score_mod_refuses_a_fractional_offset(name, argument):
    # ALiBi gave a bias between positions (−0.625 …), T5 and Swin crashed inside torch
    encoding = posenc.build(name, **ENCODING_KWARGS[name])
    with pytest.raises(TypeError, match=f"{argument} must be an integer, got 2.5"):
        _score_mod_at_offsets(encoding, **{argument: 2.5})


@pytest.mark.parametrize("offset", [-3, 47])
def test_swins_score_mod_takes_no_offsets(offset):
    # −3 wrapped round to other rows of the table silently; 47 read past it inside torch
    swin = posenc.build("swin", n_heads=4)
    with pytest.raises(ValueError, match=f"takes no offsets, got q_offset={offset}"):
        _score_mod_at_offsets(swin, q_offset=offset)
    expected = swin.bias(torch.arange(3), torch.arange(5))  # [h, i, j]
    torch.testing.assert_close(_score_mod_at_offsets(swin)[0], expected)


@pytest.mark.parametrize(("name", "flag"), [("alibi", "symmetric"), ("t5", "bidirectional")])
def test_the_two_sided_flags_must_be_bools_and_are_declared(name, flag):
    # bool("False") is True: the string made a causal bias two-sided
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        posenc.build(name, n_heads=4, **{flag: "False"})
    assert posenc.build(name, n_heads=4, **{flag: True}).capabilities.two_sided is True
    assert posenc.build(name, n_heads=4, **{flag: False}).capabilities.two_sided is False
