"""What an encoding declares: the views it gives (``views``) and its cells of ``posenc list``
(``where_it_acts``, ``used_by``), with the defaults an encoding that declares nothing gets."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import specimen
from posenc.encodings import ENCODINGS, VIEWS, PositionalEncoding, describe
from posenc.encodings.base import NOT_DECLARED, PLACES, RotarySpectrum
from posenc.encodings.views import along_line, frequencies, view

#: Settings whose views differ from the specimen's: frequencies that follow the length, a rotation per head,
#: codes on two axes, one-sided buckets.
VARIANTS = {
    "rope dynamic": (
        "rope",
        {
            "d_head": 16,
            "scaling": "dynamic",
            "scaling_args": {"factor": 2.0, "original_max_position_embeddings": 32},
        },
    ),
    "rope mixed": ("rope", {"d_head": 16, "axes": 2, "mixed": True, "n_heads": 2}),
    "rope xpos": ("rope", {"d_head": 16, "xpos": True}),
    "sinusoidal on 2 axes": ("sinusoidal", {"d_model": 16, "axes": 2}),
    "t5 causal": ("t5", {"n_heads": 2, "bidirectional": False}),
}


def _given(encoding: PositionalEncoding) -> set[str]:
    """The views whose method gives something (not None) at position 0 (or a window's first token)."""
    origin = along_line(encoding, torch.arange(1))
    q = torch.randn(1, encoding.n_heads or 1, 3, encoding.d_head or 8)
    calls = {
        "codes": ("codes", (origin,)),
        "rotation_tables": ("rotation_tables", (origin,)),
        "frequencies": ("frequency_pieces", ()),
        "rotary_spectrum": ("rotary_spectrum", ()),
        "bias": ("bias", (origin, origin)),
        "distance_bias": ("distance_bias", (torch.arange(1),)),
        "bucketing": ("bucketing", ()),
        "bucket_table": ("bucket_table", ()),
        "offset_table": ("offset_table", ()),
        "counted_positions": ("counted_positions", (q, q)),
        "closed_form_dot": ("closed_form_dot", (torch.arange(2),)),
        "shift_map": ("shift_map", (1,)),
        "translations": ("translations", (8,)),
    }
    with torch.no_grad():
        answers = {
            view: getattr(encoding, method)(*args) if hasattr(encoding, method) else None
            for view, (method, args) in calls.items()
        }
    assert set(answers) == set(VIEWS)
    return {view for view, answer in answers.items() if answer is not None}


#: label -> (registered name, constructor arguments; None: the specimen).
INSTANCES = {**{name: (name, None) for name in posenc.available()}, **VARIANTS}


@pytest.mark.parametrize("label", list(INSTANCES))
def test_every_encoding_declares_exactly_the_views_its_methods_give(label):
    name, arguments = INSTANCES[label]
    encoding = specimen(name) if arguments is None else posenc.build(name, **arguments)
    assert _given(encoding) == set(encoding.views)


def test_views_follow_the_settings_where_they_differ():
    views = {label: posenc.build(name, **args).views for label, (name, args) in VARIANTS.items()}
    assert "frequencies" not in views["rope dynamic"] and "rotation_tables" in views["rope dynamic"]
    assert views["rope mixed"] == {"rotary_spectrum"}
    assert views["sinusoidal on 2 axes"] == {"codes"}
    assert posenc.build("rope", d_head=8, layout="interleaved").rotary_spectrum() == RotarySpectrum(
        8, 10000.0, "interleaved"
    )


class Nothing(PositionalEncoding):
    """Declares nothing."""

    kind = "bias"


class Codes(PositionalEncoding):
    """Defines ``codes`` and ``frequency_pieces``: it gives both views without declaring ``views``."""

    kind = "additive"

    def codes(self, positions):
        return positions[..., None].to(torch.float64)

    def frequency_pieces(self):
        return torch.ones(1, 1, dtype=torch.float64)


class ScoreModOnly(PositionalEncoding):
    kind = "bias"

    def score_mod(self, q_offset=0, kv_offset=0, *, q_positions=None, k_positions=None):
        return lambda score, b, h, q_idx, kv_idx: score


def test_an_encoding_that_declares_no_views_gives_those_whose_method_it_defines():
    assert Nothing().views == frozenset()
    assert Codes().views == {"codes", "frequencies"}
    assert ScoreModOnly().views == {"bias"}  # its bias is derived from the score_mod


def test_a_class_attribute_declares_the_views_and_undeclared_views_read_as_none():
    class Narrowed(Codes):
        views = frozenset({"codes"})

    narrowed = Narrowed()
    assert narrowed.views == {"codes"} and frequencies(narrowed) is None  # defined, but not declared
    assert view(narrowed, "codes", torch.arange(2)).tolist() == [[0.0], [1.0]]
    base = Nothing()
    assert all(not hasattr(base, name) for name in VIEWS if name != "bias")  # the base defines no view
    assert view(base, "offset_table") is None and view(base, "bucketing") is None
    q = torch.ones(1, 1, 2, 4)
    assert view(base, "rotary_spectrum") is None and view(base, "counted_positions", q, q) is None
    with pytest.raises(ValueError, match="unknown view 'tables'"):
        view(base, "tables")


@pytest.mark.parametrize("views", [frozenset({"codes", "tables"}), ("codes",)])
def test_register_refuses_views_that_are_not_a_set_of_known_names(views):
    declared = type("Declared", (Codes,), {"views": views})
    with pytest.raises(ValueError, match=r"Declared.views must be a set of codes, rotation_tables"):
        posenc.register("declared_views", declared)
    assert "declared_views" not in ENCODINGS


def test_where_it_acts_defaults_to_its_kinds_place_and_used_by_to_not_declared():
    assert describe(Nothing).where_it_acts == PLACES["bias"] == "biases the attention scores"
    assert (
        describe(Codes).where_it_acts == "added to the token embeddings"
        and describe(Codes()).where_it_acts == describe(Codes).where_it_acts
    )
    assert describe(Nothing).used_by == NOT_DECLARED == "not declared"

    class Declared(Nothing):
        where_it_acts, used_by = "adds a constant", "nobody"

    assert (describe(Declared).where_it_acts, describe(Declared).used_by) == ("adds a constant", "nobody")


@pytest.mark.parametrize(
    "name", [n for n in posenc.available() if ENCODINGS[n].__module__.startswith("posenc.")]
)
def test_every_shipped_encoding_declares_where_it_acts_and_who_uses_it(name):
    description = describe(name)
    assert description.where_it_acts not in (None, NOT_DECLARED), name
    assert description.used_by != NOT_DECLARED, name
