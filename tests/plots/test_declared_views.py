"""Figures and tables follow the views an encoding declares: a plugin declaring a view gets its figure and
table, and one declaring none gets no figure of it, without any of its views being called to find out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from posenc.analysis import code_table, properties, swin_offset_table
from posenc.analysis.counting import sentence_counts
from posenc.attention import MultiHeadAttention
from posenc.encodings import ENCODINGS, PositionalEncoding, resolve_positions
from posenc.plots import gallery
from tests.plots.artists import by_gid

OFFSETS = torch.arange(18, dtype=torch.float64).reshape(2, 3, 3)  # [h, 2Wh − 1, 2Ww − 1] of a 2×2 window


class WindowTable(PositionalEncoding):
    """A bias per head and 2-D offset of a 2×2 window, shown through its ``offset_table`` view."""

    kind = "bias"
    n_heads = 2
    figures = {"table-heads": None}

    def offset_table(self) -> torch.Tensor:
        return OFFSETS


class CountsTokens(PositionalEncoding):
    """Counts every key up to the query as one position (every gate 1), through ``counted_positions``."""

    kind = "bias"
    d_head = 8
    figures = {"counted-positions": None}

    def counted_positions(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        i, j = q.shape[2], k.shape[2]
        counts = torch.arange(i)[:, None] - torch.arange(j)[None, :] + 1.0  # [i, j]
        return counts.clamp(min=0).expand(q.shape[0], q.shape[1], i, j)


def _ramp(positions: torch.Tensor) -> torch.Tensor:
    """sin(position / (c + 1)) in channel c = 0 … 7, float64 ``[..., 8]``."""
    return torch.sin(positions.to(torch.float64)[..., None] / torch.arange(1, 9, dtype=torch.float64))


class RampCodes(PositionalEncoding):
    """Adds ``_ramp`` of the positions to the embeddings, declaring its ``codes`` by defining them."""

    kind = "additive"
    d_model = 8

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        return _ramp(positions)

    def embed(self, x, positions=None):
        return x + _ramp(resolve_positions(positions, x, seq_dim=1)).to(x.dtype)


def _never(self, *args, **kwargs):
    raise AssertionError(f"{type(self).__name__} was called on a view it does not declare")


#: Every view method but ``bias``, raising: an encoding whose views include none of them.
NEVER = {
    method: _never
    for method in (
        "codes",
        "rotation_tables",
        "frequency_pieces",
        "frequencies",
        "rotary_spectrum",
        "distance_bias",
        "bucketing",
        "bucket_table",
        "offset_table",
        "counted_positions",
    )
}


class SilentCodes(RampCodes):
    """Adds its codes through ``embed`` but declares no view: every view method raises if called."""

    views = frozenset()
    locals().update(NEVER)


class SilentBias(PositionalEncoding):
    """A bias of the distance declaring only the ``bias`` view: every other view method raises if called."""

    kind = "bias"
    n_heads = 2
    views = frozenset({"bias"})
    locals().update(NEVER)

    def bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).to(torch.float32)
        return -distance.abs().expand(self.n_heads, -1, -1)  # [h, i, j]


@pytest.fixture
def plugin(monkeypatch):
    """Registers a class under its lower-cased name for one test; returns that name."""

    def register(cls: type[PositionalEncoding]) -> str:
        monkeypatch.setitem(ENCODINGS, cls.__name__.lower(), cls)
        return cls.__name__.lower()

    return register


def _drawn(name: str) -> dict[str, Figure]:
    return {spec.name.removeprefix(f"{name}-"): spec.build() for spec in gallery.figures(name)}


def test_a_plugin_declaring_an_offset_table_gets_it_drawn_and_tabulated(plugin):
    drawn = _drawn(plugin(WindowTable))
    assert list(drawn) == ["table-heads"]
    for head in range(2):
        np.testing.assert_array_equal(
            by_gid(drawn["table-heads"])[f"offsets-head-{head}"].get_array(), OFFSETS[head]
        )
    assert torch.equal(swin_offset_table(WindowTable()), OFFSETS)


def test_a_plugin_declaring_counted_positions_gets_them_drawn(plugin):
    drawn = _drawn(plugin(CountsTokens))
    counts = sentence_counts(CountsTokens())
    np.testing.assert_array_equal(
        by_gid(drawn["counted-positions"])["counted"].get_ydata(), counts.counted.numpy()
    )
    np.testing.assert_array_equal(counts.counted.numpy(), counts.token_count.numpy())  # every gate 1


def test_a_plugin_defining_codes_gets_its_kinds_code_figures_and_table(plugin):
    drawn = _drawn(plugin(RampCodes))
    assert list(drawn) == ["matrix-rows", "gram", "logit-shift"]
    table = code_table(RampCodes(), gallery.MATRIX_LENGTH)
    np.testing.assert_array_equal(by_gid(drawn["matrix-rows"])["matrix"].get_array(), table.numpy())


#: class -> (its figures, a claim left n/a for want of a view, the view its reason names).
SILENT = {
    SilentCodes: (["logit-shift"], "unique", "codes"),
    SilentBias: (["bias-heads", "logit-shift"], "precision", "distance_bias"),
}


@pytest.mark.parametrize("cls", list(SILENT), ids=lambda cls: cls.__name__)
def test_a_plugin_declaring_no_view_gets_no_figure_of_it_and_is_never_probed(plugin, cls):
    figures, claim, view = SILENT[cls]
    assert list(_drawn(plugin(cls))) == figures  # a call of an undeclared view would raise here
    measured = properties(cls(), length=32)
    assert [name for name, prop in measured.items() if prop.error is not None] == []
    assert measured[claim].holds is None and f"no {view} view" in measured[claim].reason
    with pytest.raises(TypeError, match="adds none"):
        code_table(cls(), 4)
    with pytest.raises(TypeError, match="table of 2-D offsets"):
        swin_offset_table(cls())


def test_attention_takes_no_per_distance_path_for_a_bias_that_declares_none():
    attention = MultiHeadAttention(16, 2, encoding=SilentBias(), causal=True)
    with torch.no_grad():
        out = attention(
            torch.randn(1, 5, 16)
        )  # consecutive positions on the CPU: distance_bias would be read
    assert out.shape == (1, 5, 16)
