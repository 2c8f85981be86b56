"""Attention logits through an encoding's hooks, and their change when every position shifts."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import build
from posenc.analysis import attention_logits, logit_shift_change, position_sensitivity, properties
from posenc.analysis.shift import shift_plan


def test_attention_logits_are_q_dot_k_over_sqrt_d_plus_the_bias():
    alibi = build("alibi", n_heads=2)
    positions = torch.arange(5)
    logits = attention_logits(alibi, positions, d_model=8, d_head=4, seed=3)
    nope = attention_logits(build("nope"), positions, d_model=8, n_heads=2, d_head=4, seed=3)
    assert logits.shape == (2, 5, 5) and logits.dtype == torch.float64
    torch.testing.assert_close(logits - nope, alibi.bias(positions, positions).double())
    # nope by hand: the same draws from the same seed
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(1, 5, 8, generator=generator, dtype=torch.float64)
    w_q, w_k = torch.randn(2, 8, 8, generator=generator, dtype=torch.float64) / math.sqrt(8)
    q = (x @ w_q).view(1, 5, 2, 4).transpose(1, 2)
    k = (x @ w_k).view(1, 5, 2, 4).transpose(1, 2)
    torch.testing.assert_close(nope, (q @ k.transpose(-1, -2))[0] / 2)


@pytest.mark.parametrize(
    "name, kwargs", [("rope", {"d_head": 16}), ("alibi", {"n_heads": 4}), ("t5", {"n_heads": 4})]
)
def test_relative_encodings_do_not_move_under_a_shift(name, kwargs):
    changes = logit_shift_change(build(name, **kwargs), shifts=(1, 50, 100_000))
    assert max(changes.values()) < 1e-12


def test_absolute_encodings_move_under_a_shift():
    changes = logit_shift_change(build("sinusoidal", d_model=32), shifts=(1, 50))
    assert min(changes.values()) > 1e-3


def test_nope_does_not_see_position_and_rope_does():
    assert position_sensitivity(build("nope")) == 0.0
    assert position_sensitivity(build("rope", d_head=16)) > 1e-3


def test_swin_shifts_must_be_translations_inside_the_window():
    swin = build("swin", n_heads=2, window=7)
    positions, shifts = shift_plan(swin)
    assert positions.tolist() == [0, 1, 2, 3] and shifts == (1, 3, 7, 45)
    assert max(logit_shift_change(swin).values()) == 0.0
    with pytest.raises(
        ValueError, match="shift 5 is not a translation of tokens 0 … 3 inside a 7×7 Swin window"
    ):
        shift_plan(swin, (5,))


def test_default_shifts_stay_inside_a_learned_table():
    positions, shifts = shift_plan(build("learned", max_len=15, d_model=8))
    assert len(positions) == 7 and shifts == (1, 7)
    positions, shifts = shift_plan(build("learned", max_len=4, d_model=8))
    assert len(positions) == 2 and shifts == (1,)
    with pytest.raises(ValueError, match="a table of 1 positions leaves no room to shift"):
        shift_plan(build("learned", max_len=1, d_model=8))


def test_a_symmetric_bias_of_the_distance_is_seen_to_read_position():
    # reversing the positions keeps every |i − j|: symmetric ALiBi used to be classed as blind to position
    assert position_sensitivity(build("alibi", n_heads=2, symmetric=True)) > 1e-3
    assert properties(build("alibi", n_heads=2, symmetric=True))["relative"].category == "explicit"
