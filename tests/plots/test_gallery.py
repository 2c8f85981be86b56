"""The gallery: every name lists figures that build, draw the analysis numbers, and are named uniquely."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from posenc.analysis import closed_form_dot, dot_by_distance, gram_matrix, logit_shift_change, specimen
from posenc.encodings import ENCODINGS, PositionalEncoding, available, resolve_positions
from posenc.functional import sinusoidal_table
from posenc.plots import gallery
from tests.plots.artists import REPORT_COLUMN_PX, by_gid, covered, cut_texts, labelled, titles


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[gallery.FigureSpec, Figure]]:
    """Every figure of the gallery, built once: file stem -> (spec, figure)."""
    return {spec.name: (spec, spec.build()) for name in gallery.names() for spec in gallery.figures(name)}


def test_names_are_every_registered_encoding_then_comparison():
    assert gallery.names() == [*available(), "comparison"]


def test_an_unknown_name_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="unknown gallery name .nosuch.; valid: alibi, .*, comparison"):
        gallery.figures("nosuch")


def test_figure_names_are_unique_and_prefixed_by_their_gallery_name():
    stems = []
    for name in gallery.names():
        specs = gallery.figures(name)
        assert specs, f"{name} has no figures"
        for spec in specs:
            assert (
                spec.name.startswith(f"{name}-") and spec.name == spec.name.lower() and " " not in spec.name
            )
            assert spec.title and spec.caption.endswith(".")
            stems.append(spec.name)
    assert len(stems) == len(set(stems))


def test_every_figure_builds_labelled_titled_and_with_its_data_artists(built):
    for stem, (spec, figure) in built.items():
        assert isinstance(figure, Figure), stem
        assert labelled(figure), f"{stem}: an axis has no label"
        assert spec.title in titles(figure), f"{stem}: its title is not drawn"
        assert by_gid(figure), f"{stem}: no data artist carries a gid"


def test_every_figure_renders_to_png(built, report_dir):
    # the report (tests/conftest.py, written once) saves every gallery figure as its own PNG
    for stem in built:
        assert (report_dir / "figures" / f"{stem}.png").read_bytes().startswith(b"\x89PNG"), stem


def test_sinusoidal_figures_draw_the_seed_tables(built):
    d_model = specimen("sinusoidal").d_model
    columns = by_gid(built["sinusoidal-matrix-columns"][1])["matrix"].get_array()
    np.testing.assert_array_equal(
        columns,
        sinusoidal_table(gallery.MATRIX_LENGTH, d_model, dtype=torch.float64, layout="columns").numpy(),
    )
    rows = by_gid(built["sinusoidal-matrix-rows"][1])["matrix"].get_array()
    np.testing.assert_array_equal(rows, columns.T)
    gram = by_gid(built["sinusoidal-gram"][1])["gram"].get_array()
    table = sinusoidal_table(gallery.GRAM_LENGTH, d_model, dtype=torch.float64)
    np.testing.assert_array_equal(gram, gram_matrix(table).numpy())


@pytest.mark.parametrize("stem", ["sinusoidal-flat-lines", "rope-flat-lines"])
def test_flat_line_figures_draw_the_dot_products_and_the_closed_form(built, stem):
    artists = by_gid(built[stem][1])
    table = sinusoidal_table(gallery.FLAT_LENGTH, 64, dtype=torch.float64)
    for distance, values in dot_by_distance(table, gallery.FLAT_DISTANCES).items():
        np.testing.assert_allclose(
            artists[f"distance-{distance}"].get_ydata(), values.numpy(), rtol=0, atol=1e-12
        )
        # RoPE's θ_k are float64 values, the sinusoidal ω_k exact: the closed forms agree to rounding
        np.testing.assert_allclose(
            artists[f"expected-{distance}"].get_ydata(), float(closed_form_dot(distance, 64)), rtol=1e-14
        )


def test_the_comparison_shows_every_registered_encoding_at_its_measured_change(built):
    artists = by_gid(built["comparison-logit-shift"][1])
    for name in available():
        values = np.array(list(logit_shift_change(specimen(name)).values()))
        np.testing.assert_array_equal(artists[f"change-{name}"].get_xdata(), np.maximum(values, 1e-20))


def test_the_angle_error_figure_uses_ropes_frequencies_not_the_first_rotary_by_name(built):
    # the first rotary encoding by name was M-RoPE: the figure was titled "M-RoPE frequencies"
    assert gallery.reference_rotary() == "rope"
    spec, figure = built["comparison-angle-error"]
    assert spec.title == "cos/sin error against position at RoPE's frequencies (r=64, base=10000)"
    assert spec.title in titles(figure)


def test_every_figure_fits_the_reports_column_at_its_drawn_size(built):
    # drawn at 1540 px, the rotating vector was shown at a third of its size: labels of 5 px
    from posenc.report import DPI

    wide = {stem: round(figure.get_figwidth() * DPI) for stem, (_, figure) in built.items()}
    assert {stem: px for stem, px in wide.items() if px > REPORT_COLUMN_PX} == {}


def test_no_figure_text_is_cut_at_the_figure_edge(built):
    # the 2-D sin-cos similarity map's title ran past both edges of its narrow figure
    assert {stem: cut for stem, (_, figure) in built.items() if (cut := cut_texts(figure))} == {}


def test_no_legend_or_note_covers_what_the_figure_draws(built):
    # M-RoPE's legend hid the first segment's name and span; the zero-frequency note of the RoPE
    # scalings ran across their lines
    assert {stem: hidden for stem, (_, figure) in built.items() if (hidden := covered(figure))} == {}


class RotateOnly(PositionalEncoding):
    """A rotation by position of every pair, given through ``rotate`` alone (no rotation_tables)."""

    kind = "rotary"

    def rotate(self, q, k, q_positions=None, k_positions=None):
        return self._turn(q, q_positions), self._turn(k, k_positions)

    @staticmethod
    def _turn(x, positions):
        angles = resolve_positions(positions, x, seq_dim=2).to(x.dtype)[:, None]  # [s, 1]
        even, odd = x[..., 0::2], x[..., 1::2]
        turned = torch.stack(
            (even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos())
        )
        return turned.movedim(0, -1).flatten(-2)


class EmbedOnly(PositionalEncoding):
    """An additive code given through ``embed`` alone (no codes)."""

    kind = "additive"

    def embed(self, x, positions=None):
        return x + resolve_positions(positions, x, seq_dim=1).to(x.dtype).unsqueeze(-1).sin()


@pytest.mark.parametrize("cls", [RotateOnly, EmbedOnly])
def test_default_figures_needing_a_view_the_encoding_lacks_are_left_out(monkeypatch, cls):
    # used to raise "cannot unpack non-iterable NoneType" / "encoding must add a code per position"
    monkeypatch.setitem(ENCODINGS, "only_hook", cls)
    specs = gallery.figures("only_hook")
    assert [spec.name for spec in specs] == ["only_hook-logit-shift"]
    assert isinstance(specs[0].build(), Figure)


def test_a_declared_figure_needing_a_missing_view_is_refused_naming_the_view(monkeypatch):
    class DeclaresRotation(RotateOnly):
        figures = {"rotation": None}

    monkeypatch.setitem(ENCODINGS, "declares_rotation", DeclaresRotation)
    with pytest.raises(
        ValueError,
        match="declares_rotation asks for figure kind 'rotation', which needs the rotation_tables view",
    ):
        gallery.figures("declares_rotation")
