"""The figures ``posenc plot`` draws: for each registered encoding, and for the comparison between them.

Each encoding names the figures drawn of it, and their captions, in its own file (``figures``: figure
kind -> caption); one that names none gets the defaults of its kind (:data:`DEFAULT_FIGURES`) that its
views allow. This module holds the figure kinds (:data:`KINDS`): how each is drawn from any encoding
through an analysis function, from the encoding's specimen, so what is drawn is what the analysis
measures, and which of the views an encoding declares (``views``: ``codes``, ``rotation_tables`` …)
it needs: a default figure whose view the encoding does not declare is left out, and no view is called
to learn whether it is there. Nothing here knows an encoding by name or reads its own attributes.
``figures(name)`` describes them; a figure is computed and drawn only when its spec's ``build`` is
called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from matplotlib.figure import Figure

from posenc.analysis import (
    bias_by_distance,
    bias_matrix,
    code_table,
    dot_by_distance,
    gram_matrix,
    logit_shift_change,
    scaled_inv_freq,
    specimen,
    swin_offset_table,
    t5_bucket_map,
)
from posenc.analysis.content import attention_weights, content_terms
from posenc.analysis.counting import sentence_counts
from posenc.analysis.grid import grid_bias, mrope_example, patch_similarity
from posenc.analysis.precision import RECIPES, angle_error
from posenc.analysis.spectrum import EXAMPLE_FACTOR, EXAMPLE_ORIGINAL_LENGTH
from posenc.encodings import PositionalEncoding, available, describe
from posenc.encodings.views import along_line, frequencies, view
from posenc.plots.bias import bias_heads, bucket_map, bucket_table, distance_bias, offset_tables
from posenc.plots.content import causal_heads
from posenc.plots.counting import counted_positions
from posenc.plots.dot_product import flat_lines
from posenc.plots.grid import axis_positions, grid_bias_heads, similarity_map
from posenc.plots.matrix import encoding_matrix, gram_heatmap
from posenc.plots.precision import angle_errors
from posenc.plots.rotation import rotating_vector
from posenc.plots.shift import logit_shift
from posenc.plots.spectrum import inv_freq_scalings, wavelength_spectrum

#: Positions drawn in the code matrices, the Gram matrices and the flat lines (seed 002's distances).
MATRIX_LENGTH = 96
GRAM_LENGTH = 128
FLAT_LENGTH = 32
FLAT_DISTANCES = (1, 3, 5, 7, 9, 11, 13)
#: Positions at which one vector is shown rotating.
ROTATION_POSITIONS = 33
#: Query/key positions of the bias heatmaps, and the distances of the bias lines.
BIAS_POSITIONS = 48
#: Tokens of the fixed random input whose content terms and attention weights are drawn.
CONTENT_TOKENS = 32
#: The grid of the patch-similarity figure, and of the 2-D bias heatmaps.
PATCH_GRID = (14, 14)
BIAS_GRID = (9, 9)
#: Positions of the angle-error figure: 2^0 … 2^22, eight per octave.
ERROR_POSITIONS = torch.unique(torch.round(torch.logspace(0, 22, 22 * 8 + 1, base=2.0)).to(torch.int64))


@dataclass(frozen=True)
class FigureSpec:
    """One figure of the gallery."""

    name: str  # file stem, e.g. "sinusoidal-matrix-rows"; unique across the gallery
    title: str  # heading, also drawn on the figure
    caption: str  # one or two sentences: what to see
    build: Callable[[], Figure]  # computes the analysis numbers and draws them


@dataclass(frozen=True)
class FigureKind:
    """How one kind of figure is drawn from any encoding that asks for it."""

    title: Callable[[str, PositionalEncoding], str]  # (label, encoding) -> title
    draw: Callable[[PositionalEncoding, str, str], Figure]  # (encoding, title, registered name) -> Figure
    caption: str  # the caption where the encoding gives none
    needs: Callable[[PositionalEncoding], str | None] = lambda encoding: None  # the view it lacks, or None


def _needs(*views: str) -> Callable[[PositionalEncoding], str | None]:
    """A ``needs`` for a figure drawn from any one of ``views``: None where the encoding declares one."""

    def needs(encoding: PositionalEncoding) -> str | None:
        return None if any(view in encoding.views for view in views) else " or ".join(views)

    return needs


_needs_bias = _needs("bias")


def _needs_distance_bias(encoding: PositionalEncoding) -> str | None:
    if encoding.position_space.axes != 1:
        return "a bias of 1-D distances"
    return _needs_bias(encoding)


def _needs_grid(encoding: PositionalEncoding) -> str | None:
    return None if encoding.position_space.columns >= 2 else "positions on two axes or more"


def _needs_grid_bias(encoding: PositionalEncoding) -> str | None:
    return _needs_grid(encoding) or _needs_bias(encoding)


def _needs_three_axes(encoding: PositionalEncoding) -> str | None:
    return None if encoding.position_space.columns == 3 else "positions on three axes (t, h, w)"


def _within(encoding: PositionalEncoding, length: int) -> int:
    """``length`` positions, or fewer where the encoding holds fewer."""
    limit = encoding.position_space.limit
    return length if limit is None else min(length, limit)


def _bias_positions(encoding: PositionalEncoding) -> int:
    """Query/key positions of a bias heatmap: BIAS_POSITIONS, or every position of an encoding that
    holds few (a window's tokens)."""
    limit = encoding.position_space.limit
    return limit if limit is not None and limit <= 2 * BIAS_POSITIONS else BIAS_POSITIONS


def _rows(encoding: PositionalEncoding) -> int:
    """Rows of a code matrix: a table's every row, else MATRIX_LENGTH."""
    return encoding.position_space.limit or MATRIX_LENGTH


def _rotation_rows(encoding: PositionalEncoding, length: int) -> torch.Tensor:
    """(cos mθ_k, sin mθ_k) of every pair at positions 0 … length−1, ``[T, r/2, 2]`` float64: where a
    vector whose pairs all start at (1, 0) is carried by the rotation."""
    cos, sin = view(encoding, "rotation_tables", along_line(encoding, torch.arange(length)))  # [T, r/2] each
    return torch.stack((cos, sin), dim=-1)


def _flat(encoding: PositionalEncoding, title: str, name: str) -> Figure:
    rotary = "codes" not in encoding.views
    rows = _rotation_rows(encoding, FLAT_LENGTH).flatten(1) if rotary else code_table(encoding, FLAT_LENGTH)
    dots = dot_by_distance(rows, FLAT_DISTANCES)
    closed = view(encoding, "closed_form_dot", torch.tensor(FLAT_DISTANCES))
    expected = None if closed is None else dict(zip(FLAT_DISTANCES, closed.tolist(), strict=True))
    figure = flat_lines(dots, expected, title=title)
    if rotary:
        axes = figure.axes[0]
        axes.set_ylabel("q_i · k_(i+d)   (x rotated at i and at i + d)")
        if expected is not None:
            axes.get_legend().set_title("solid: measured\ndashed: closed form")
    return figure


def _counted(encoding: PositionalEncoding, title: str) -> Figure:
    counts = sentence_counts(encoding)
    return counted_positions(counts.words, counts.counted, counts.token_count, title=title)


def _buckets(encoding: PositionalEncoding, title: str) -> Figure:
    num_buckets, max_distance = view(encoding, "bucketing")
    relative = torch.arange(-(max_distance + 32), max_distance + 33)
    buckets = t5_bucket_map(relative, num_buckets=num_buckets, max_distance=max_distance)
    return bucket_map(relative, buckets, title=title)


def _scalings(encoding: PositionalEncoding, title: str) -> Figure:
    spectrum = view(encoding, "rotary_spectrum")
    return inv_freq_scalings(scaled_inv_freq(spectrum.rotary_dim, spectrum.base), title=title)


def _spectrum_sizes(encoding: PositionalEncoding) -> str:
    spectrum = view(encoding, "rotary_spectrum")
    return f"r={spectrum.rotary_dim}, base={spectrum.base:g}"


def _table_shape(encoding: PositionalEncoding) -> str:
    return f"T={_rows(encoding)}, d={code_table(encoding, 1).shape[-1]}"


KINDS: dict[str, FigureKind] = {
    "matrix-rows": FigureKind(
        lambda label, e: f"{label} codes PE ∈ ℝ^(T×d), one row per position ({_table_shape(e)})",
        lambda e, title, name: encoding_matrix(code_table(e, _rows(e)), layout="rows", title=title),
        "Each row is one position's code.",
        _needs("codes"),
    ),
    "matrix-columns": FigureKind(
        lambda label, e: f"{label} codes P ∈ ℝ^(d×n), one column per position ({_table_shape(e)})",
        lambda e, title, name: encoding_matrix(code_table(e, _rows(e)).T, layout="columns", title=title),
        "Each column is one position's code, each row one dimension.",
        _needs("codes"),
    ),
    "gram": FigureKind(
        lambda label, e: f"{label} Gram matrix PE_i·PE_j (T={_within(e, GRAM_LENGTH)})",
        lambda e, title, name: gram_heatmap(gram_matrix(code_table(e, _within(e, GRAM_LENGTH))), title=title),
        "The dot product of every two positions' codes: stripes parallel to the diagonal where it "
        "depends on the distance only.",
        _needs("codes"),
    ),
    "flat-lines": FigureKind(
        lambda label, e: f"{label}: dot products per distance d (T={FLAT_LENGTH})",
        _flat,
        "One line per distance: flat where the dot product depends on the distance only, dashed where a "
        "closed form predicts it.",
        _needs("codes", "rotation_tables"),
    ),
    "wavelengths": FigureKind(
        lambda label, e: f"{label} wavelengths λ_k = 2π/ω_k",
        lambda e, title, name: wavelength_spectrum(2 * torch.pi / frequencies(e), title=title),
        "The wavelength of every sin/cos pair, on a log axis.",
        _needs("frequencies"),
    ),
    "rotation": FigureKind(
        lambda label, e: f"{label}: one vector rotated at positions 0 … {ROTATION_POSITIONS - 1}",
        lambda e, title, name: rotating_vector(
            _rotation_rows(e, ROTATION_POSITIONS),
            inv_freq=frequencies(e),
            title=title,
        ),
        "Each pair of the vector turns on a circle by its frequency per position.",
        _needs("rotation_tables"),
    ),
    "inv-freq-scalings": FigureKind(
        lambda label, e: (
            f"{label} inv_freq per scaling ({_spectrum_sizes(e)}, "
            f"{EXAMPLE_FACTOR:g}× of {EXAMPLE_ORIGINAL_LENGTH} positions)"
        ),
        lambda e, title, name: _scalings(e, title),
        "The frequencies of every context-extension scaling, against the unscaled ones.",
        _needs("rotary_spectrum"),
    ),
    "bias-heads": FigureKind(
        lambda label, e: f"{label} bias per head ({_bias_positions(e)} query and key positions)",
        lambda e, title, name: bias_heads(bias_matrix(e, _bias_positions(e)), title=title),
        "The bias every head adds to the score of query i and key j.",
        _needs_bias,
    ),
    "bias-distance": FigureKind(
        lambda label, e: f"{label} bias against distance, one line per head",
        lambda e, title, name: distance_bias(
            torch.arange(0, 2 * BIAS_POSITIONS + 1),
            bias_by_distance(e, torch.arange(0, 2 * BIAS_POSITIONS + 1)),
            title=title,
        ),
        "The bias of each head as the key moves away from the query.",
        _needs_distance_bias,
    ),
    "buckets": FigureKind(
        lambda label, e: "{} buckets (num_buckets={}, max_distance={})".format(label, *view(e, "bucketing")),
        lambda e, title, name: _buckets(e, title),
        "The bucket of each key − query distance.",
        _needs("bucketing"),
    ),
    "table": FigureKind(
        lambda label, e: f"{label} bias table [bucket, head] at initialisation (n_heads={e.n_heads})",
        lambda e, title, name: bucket_table(view(e, "bucket_table"), title=title),
        "The learned values, one per bucket and head.",
        _needs("bucket_table"),
    ),
    "table-heads": FigureKind(
        lambda label, e: f"{label} bias table per head by 2-D offset at initialisation",
        lambda e, title, name: offset_tables(swin_offset_table(e), title=title),
        "One learned value per 2-D offset between two tokens.",
        _needs("offset_table"),
    ),
    "patch-similarity": FigureKind(
        lambda label, e: f"{label}: one patch against a {PATCH_GRID[0]}×{PATCH_GRID[1]} grid of patches",
        lambda e, title, name: similarity_map(
            patch_similarity(e, PATCH_GRID), patch=(PATCH_GRID[0] // 2, PATCH_GRID[1] // 2), title=title
        ),
        "How the centre patch's position relates to every patch's: code similarity, rotated logit or bias.",
        _needs_grid,
    ),
    "grid-bias-heads": FigureKind(
        lambda label, e: f"{label} bias from the centre of a {BIAS_GRID[0]}×{BIAS_GRID[1]} grid, per head",
        lambda e, title, name: grid_bias_heads(grid_bias(e, BIAS_GRID), title=title),
        "The bias each head adds between the centre patch and every patch.",
        _needs_grid_bias,
    ),
    "mrope-positions": FigureKind(
        lambda label, e: f"{label} positions of text, an image and a video (Qwen2-VL's index)",
        lambda e, title, name: axis_positions(*mrope_example(), title=title),
        "The (t, h, w) position of every token of a mixed sequence.",
        _needs_three_axes,
    ),
    "counted-positions": FigureKind(
        lambda label, e: f"{label}'s gate-counted positions on a sample sentence (last query)",
        lambda e, title, name: _counted(e, title),
        "The position the last token's query counts to each token, p_ij = Σ_{t=j}^{i} g_it, against the "
        "token count i − j + 1 it would be if every gate were 1. The tokens are embedded with a fixed random "
        "projection (untrained q and k): the gates here are not a trained model's.",
        _needs("counted_positions"),
    ),
    "content-terms": FigureKind(
        lambda label, e: f"{label} terms read from the content, per head ({CONTENT_TOKENS} random tokens)",
        lambda e, title, name: causal_heads(
            content_terms(e, CONTENT_TOKENS), label="term added to q_i·k_j", signed=True, title=title
        ),
        "What the encoding adds to each logit from the tokens' content, for one fixed random input and "
        "untrained weights: not a function of positions, so another input draws another picture.",
        lambda e: None if e.capabilities.reads_content else "content (a layer input it reads)",
    ),
    "attention-weights": FigureKind(
        lambda label, e: f"{label} causal attention weights, per head ({CONTENT_TOKENS} random tokens)",
        lambda e, title, name: causal_heads(
            attention_weights(e, CONTENT_TOKENS), label="weight of key j for query i", signed=False, title=title
        ),
        "The weights each query gives the keys up to it, for one fixed random input, untrained projections "
        "and the encoding's own hooks.",
    ),
    "logit-shift": FigureKind(
        lambda label, e: f"{label}: attention-logit change when every position shifts by Δ",
        lambda e, title, name: logit_shift({name: logit_shift_change(e)}, title=title),
        "How far the attention logits move when every position shifts by the same Δ.",
    ),
}
#: The figures of an encoding that names none, by its kind (those whose views it gives).
DEFAULT_FIGURES: dict[str, tuple[str, ...]] = {
    "additive": ("matrix-rows", "gram", "logit-shift"),
    "rotary": ("rotation", "flat-lines", "logit-shift"),
    "bias": ("bias-heads", "logit-shift"),
    "none": ("logit-shift",),
}


def _encoding_figures(name: str) -> list[FigureSpec]:
    encoding = specimen(name)
    label = describe(name).label or name
    specs = []
    for kind, caption in _chosen_figures(name, encoding).items():
        figure = KINDS[kind]
        title = figure.title(label, encoding)
        specs.append(
            FigureSpec(
                f"{name}-{kind}",
                title,
                caption or figure.caption,
                lambda figure=figure, title=title: figure.draw(encoding, title, name),
            )
        )
    return specs


def _chosen_figures(name: str, encoding: PositionalEncoding) -> dict[str, str | None]:
    """Figure kind -> caption: those the encoding declares, else its kind's defaults that its views allow.

    Raises:
        ValueError: a declared kind this module does not draw, or one needing a view the encoding lacks.
    """
    declared = describe(name).figures
    if declared is None:
        defaults = DEFAULT_FIGURES.get(encoding.kind, ("logit-shift",))
        return {kind: None for kind in defaults if KINDS[kind].needs(encoding) is None}
    for kind in declared:
        if kind not in KINDS:
            raise ValueError(f"{name} asks for figure kind {kind!r}; known kinds: {', '.join(KINDS)}")
        if (missing := KINDS[kind].needs(encoding)) is not None:
            raise ValueError(
                f"{name} asks for figure kind {kind!r}, which needs the {missing} view; "
                f"{type(encoding).__name__} gives none"
            )
    return dict(declared)


def reference_rotary() -> str | None:
    """The rotary encoding whose frequencies the angle-error figure uses: one of seed 004's table
    (RoPE) first, then one on a single axis, then by name; None without a rotary encoding that gives
    its frequencies. The first by name alone was M-RoPE, whose three axes the figure does not show."""

    def order(name: str) -> tuple:
        row = describe(name).seed_row
        return (row is None, row.order if row else 0, specimen(name).position_space.axes != 1, name)

    rotary = [
        name
        for name in available()
        if specimen(name).kind == "rotary" and "frequencies" in specimen(name).views
    ]
    return min(rotary, key=order, default=None)


def _comparison() -> list[FigureSpec]:
    shift_title = "Attention-logit change when every position shifts by Δ, per encoding"
    rotary = reference_rotary()
    specs = [
        FigureSpec(
            "comparison-logit-shift",
            shift_title,
            "Relative encodings and NoPE stay at float64 rounding or exactly 0; absolute ones move the "
            "logits far above rounding, a learned table less only because its initial codes are small.",
            lambda: logit_shift(
                {name: logit_shift_change(specimen(name)) for name in available()}, title=shift_title
            ),
        )
    ]
    if rotary is not None:
        encoding = specimen(rotary)
        sizes = f" ({_spectrum_sizes(encoding)})" if "rotary_spectrum" in encoding.views else ""
        error_title = (
            f"cos/sin error against position at {describe(rotary).label or rotary}'s frequencies{sizes}"
        )

        def errors() -> Figure:
            exact = frequencies(encoding)  # [r/2] float64
            values = {recipe: angle_error(recipe, ERROR_POSITIONS, exact) for recipe in RECIPES}
            return angle_errors(ERROR_POSITIONS, values, title=error_title)

        specs.append(
            FigureSpec(
                "comparison-angle-error",
                error_title,
                "float32 angles (position × frequency in float32) lose accuracy in proportion to the "
                "position, about 1e-2 by 2^20; posenc's exact angles stay within one float32 rounding "
                "(2⁻²⁵) at every position.",
                errors,
            )
        )
    return specs


def names() -> list[str]:
    """The gallery names: every registered encoding, then ``"comparison"``."""
    return [*available(), "comparison"]


def figures(name: str) -> list[FigureSpec]:
    """The figures of one gallery name, unbuilt (call ``spec.build()`` for the Figure).

    Raises:
        ValueError: an unknown name (the message lists the valid ones), or an encoding asking for a
            figure kind this module does not draw.
    """
    if name == "comparison":
        return _comparison()
    if name not in available():
        raise ValueError(f"unknown gallery name {name!r}; valid: {', '.join(names())}")
    return _encoding_figures(name)
