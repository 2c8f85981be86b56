"""Capabilities are declared in one object, with the safe answer of the kind where nothing is declared."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import specimen
from posenc.attention import MultiHeadAttention
from posenc.encodings import PositionalEncoding, encoding_class
from posenc.encodings.base import PositionSpace
from posenc.encodings.capabilities import FIELDS, Capabilities, declare


def test_every_registered_encoding_answers_every_capability_with_a_bool():
    for name in posenc.available():
        capabilities = specimen(name).capabilities
        assert isinstance(capabilities, Capabilities), name
        assert all(isinstance(getattr(capabilities, field), bool) for field in FIELDS), name


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            "rotary",
            {
                "acts_in_attention": True,
                "rotated_keys_are_cacheable": False,
                "follows_moving_positions": True,
            },
        ),
        (
            "bias",
            {"acts_in_attention": True, "rotated_keys_are_cacheable": True, "follows_moving_positions": True},
        ),
        ("additive", {"acts_in_attention": False, "follows_moving_positions": False}),
        ("none", {"acts_in_attention": False, "follows_moving_positions": True}),
        # a kind posenc does not know: hooks called, no moving cache, no temperature
        (
            "gated",
            {
                "acts_in_attention": True,
                "follows_moving_positions": False,
                "accepts_query_temperature": False,
            },
        ),
    ],
)
def test_an_encoding_that_declares_nothing_gets_its_kinds_answers(kind, expected):
    plain = type("Plain", (PositionalEncoding,), {"kind": kind})
    assert {name: getattr(plain.capabilities, name) for name in expected} == expected
    assert not plain.capabilities.two_sided and plain.capabilities.follows_documents


def test_a_class_declares_what_differs_and_its_subclasses_keep_it():
    class Counted(PositionalEncoding):
        kind = "bias"
        capabilities = declare(contextual_positions=True, follows_documents=False)

    class Rotary(Counted):
        kind = "rotary"

    assert Counted.capabilities.contextual_positions and not Counted.capabilities.follows_documents
    # derived from what is declared: a factor on the query would change the counts
    assert not Counted.capabilities.accepts_query_temperature
    # the child keeps the declaration and takes its own kind's defaults for the rest
    assert Rotary.capabilities.contextual_positions and not Rotary.capabilities.rotated_keys_are_cacheable


def test_hooks_a_class_defines_are_never_silently_ignored():
    # value_terms used to be ignored unless the class also set reads_attention_weights = True
    class Values(PositionalEncoding):
        kind = "bias"
        n_heads = 2

        def value_terms(self, weights, q_positions, k_positions):
            return torch.ones(*weights.shape[:3], 8, dtype=weights.dtype)  # [b, h, i, d]

    assert Values.capabilities.reads_attention_weights
    attention = MultiHeadAttention(16, 2, encoding=Values())
    plain = MultiHeadAttention(16, 2)
    plain.load_state_dict(attention.state_dict())
    x = torch.randn(1, 5, 16)
    assert not torch.allclose(attention(x), plain(x))


def test_the_old_one_flag_attributes_are_refused_with_the_way_to_declare():
    with pytest.raises(
        TypeError, match=r"sets two_sided on the class: .*capabilities = declare\(two_sided=\.\.\.\)"
    ):

        class Old(PositionalEncoding):
            kind = "bias"
            two_sided = True


def test_a_bad_declaration_names_the_bad_value():
    with pytest.raises(TypeError, match="'two_side' is not a capability"):
        declare(two_side=True)
    with pytest.raises(TypeError, match="capability two_sided must be True or False, got 'yes'"):
        declare(two_sided="yes")
    with pytest.raises(TypeError, match="Bad.capabilities must be declare"):

        class Bad(PositionalEncoding):
            capabilities = {"two_sided": True}


def test_settings_decide_where_an_instance_says_so():
    assert posenc.build("alibi", n_heads=2, symmetric=True).capabilities.two_sided
    assert not posenc.build("alibi", n_heads=2).capabilities.two_sided
    assert not posenc.build("rope", d_head=8, xpos=True).capabilities.rotated_keys_are_cacheable
    assert encoding_class("sinusoidal").capabilities.follows_moving_positions is False
    assert encoding_class("shaw").capabilities.reads_attention_weights  # the class: it defines value_terms
    assert not posenc.build("shaw", d_head=8, values=False).capabilities.reads_attention_weights


def test_what_positions_it_takes_is_one_object_and_the_old_names_are_refused():
    assert posenc.build("learned", d_model=8, max_len=12).position_space.limit == 12
    assert posenc.build("swin", n_heads=2, window=3).position_space == PositionSpace(columns=1, axes=2, limit=9)
    with pytest.raises(TypeError, match="defines position_columns: .* one position_space property"):

        class Old(PositionalEncoding):
            @property
            def position_columns(self):
                return 2


def test_an_encoding_that_draws_in_each_call_gives_every_layer_of_a_model_the_same_draw():
    # one RoPE with DINOv3's augmentation shared by the layers drew again in each layer's rotate (the
    # layers read different coordinates in one forward); every layer now takes a copy with the same
    # generator state, so all layers read one draw per forward, as DINOv3's blocks do
    from posenc.functional.normalized import CoordinateAugmentation
    from posenc.model import TransformerLM

    augmented = posenc.build("rope", d_head=8, axes=(4, 4), augmentation=CoordinateAugmentation(rescale=2.0))
    assert augmented.capabilities.draws_per_call and not type(augmented).capabilities.draws_per_call
    model = TransformerLM(16, d_model=16, n_layers=3, n_heads=2, encoding=augmented).train()
    layers = model.layer_encodings
    assert len({id(e) for e in layers}) == 3
    draws = [e.augmentation.draw(2, e.augmentation_generator) for e in layers]
    assert all(torch.equal(d[1], draws[0][1]) and torch.equal(d[0], draws[0][0]) for d in draws)
    mixed = posenc.build("rope_mixed", d_head=8, n_heads=2, augmentation=CoordinateAugmentation(rescale=2.0))
    with pytest.raises(ValueError, match="draws its coordinate augmentation in each call"):
        TransformerLM(16, d_model=16, n_layers=2, n_heads=2, encoding=mixed, share_encoding=True)
