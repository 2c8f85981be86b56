"""What posenc says about an encoding is a Description given to ``register``, not the module's surface: the
base class keeps the attention contract, and a class declaring the fields as class attributes (a plugin
written before Description) is described by them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import posenc
from posenc.encodings import ENCODINGS, Description, PositionalEncoding, describe
from posenc.encodings.description import FIELDS, NOT_DECLARED, PLACES, SeedRow
from posenc.encodings.learned import LearnedEncoding


class Constant(PositionalEncoding):
    """A bias of one learned value."""

    kind = "bias"

    def __init__(self, n_heads: int = 2) -> None:
        super().__init__()
        self.n_heads, self.value = n_heads, nn.Parameter(torch.zeros(()))

    def bias(self, q_positions, k_positions):
        return self.value.expand(self.n_heads, q_positions.shape[-1], k_positions.shape[-1])


def test_the_base_class_holds_no_field_of_a_description():
    assert not set(FIELDS) & set(dir(PositionalEncoding))
    assert not {"specimen_arguments", "lab_skip_reason"} & set(dir(PositionalEncoding))


def test_a_description_given_to_register_is_what_describe_returns(monkeypatch):
    class Registered(Constant):
        pass

    monkeypatch.setitem(ENCODINGS, "constant", Registered)  # taken out again after the test
    described = Description(label="Constant", used_by="nobody", specimen_kwargs={"n_heads": 4})
    assert posenc.register("constant", Registered, described) is Registered
    description = describe("constant")
    assert description == dataclasses.replace(described, where_it_acts=PLACES["bias"])
    assert describe(Registered) == describe(Registered()) == description
    assert description.specimen_arguments(Registered) == {"n_heads": 4}
    with pytest.raises(dataclasses.FrozenInstanceError):
        description.label = "other"


def test_register_refuses_a_description_of_another_type(monkeypatch):
    with pytest.raises(TypeError, match="description must be a posenc.encodings.Description"):
        posenc.register("constant_refused", Constant, {"label": "Constant"})
    assert "constant_refused" not in ENCODINGS


def test_a_class_declaring_the_fields_as_attributes_is_described_by_them():
    class Declared(Constant):
        label = "Declared"
        parameter_formula = "1"
        lab_not_applicable = "not for sequences"
        figures = {"bias-heads": None}

    description = describe(Declared)
    assert (description.label, description.parameter_formula, dict(description.figures)) == (
        "Declared",
        "1",
        {"bias-heads": None},
    )
    assert description.lab_skip_reason(1) == "not for sequences" and description.lab_skip_reason(2) is None
    assert (description.where_it_acts, description.used_by, description.seed_row) == (
        PLACES["bias"],
        NOT_DECLARED,
        None,
    )


def test_a_subclass_of_a_registered_encoding_inherits_its_description_where_it_declares_none():
    class Relabelled(LearnedEncoding):
        label = "Relabelled"

    description, learned = describe(Relabelled), describe("learned")
    assert description.label == "Relabelled"
    assert description.seed_row == learned.seed_row == SeedRow(2, "Learned", "L × d", "Poor", "No")
    assert (description.parameter_formula, description.figures) == (
        learned.parameter_formula,
        learned.figures,
    )


def test_an_undescribed_encoding_gets_the_defaults():
    description = describe(Constant)
    assert description == Description(where_it_acts=PLACES["bias"])
    assert description.specimen_arguments(Constant) == {"n_heads": 8}  # its model_arguments, small model
    assert description.label is None and description.figures is None


def test_describe_names_the_registered_encodings_for_an_unknown_name():
    with pytest.raises(ValueError, match="unknown encoding 'nosuch'; available: alibi"):
        describe("nosuch")
