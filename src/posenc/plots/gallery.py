"""The figures ``posenc plot`` draws: for each registered encoding, and for the comparison between them.

Every figure is built from the encoding's specimen (``posenc.analysis.specimens``) through an analysis
function, so what is drawn is what the analysis measures. ``figures(name)`` builds the specimen and
describes its figures; the analysis runs, and the figure is drawn, only when a spec's ``build`` is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from matplotlib.figure import Figure

from posenc.analysis import (
    bias_by_distance,
    bias_matrix,
    closed_form_dot,
    code_table,
    dot_by_distance,
    gram_matrix,
    logit_shift_change,
    pair_channels,
    rotation_trajectory,
    scaled_inv_freq,
    specimen,
    swin_offset_table,
    t5_bucket_map,
    wavelengths,
)
from posenc.analysis.precision import RECIPES, angle_error
from posenc.analysis.spectrum import EXAMPLE_FACTOR, EXAMPLE_ORIGINAL_LENGTH
from posenc.encodings import available
from posenc.plots.bias import bias_heads, bucket_map, bucket_table, distance_bias, offset_tables
from posenc.plots.dot_product import flat_lines
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
#: Positions of the angle-error figure: 2^0 … 2^22, eight per octave.
ERROR_POSITIONS = torch.unique(torch.round(torch.logspace(0, 22, 22 * 8 + 1, base=2.0)).to(torch.int64))


@dataclass(frozen=True)
class FigureSpec:
    """One figure of the gallery."""

    name: str  # file stem, e.g. "sinusoidal-matrix-rows"; unique across the gallery
    title: str  # heading, also drawn on the figure
    caption: str  # one or two sentences: what to see
    build: Callable[[], Figure]  # computes the analysis numbers and draws them


def _sinusoidal() -> list[FigureSpec]:
    encoding = specimen("sinusoidal")
    d_model, base = encoding.d_model, encoding.base

    def flat() -> Figure:
        dots = dot_by_distance(code_table(encoding, FLAT_LENGTH), FLAT_DISTANCES)
        expected = {distance: float(closed_form_dot(distance, d_model, base)) for distance in dots}
        return flat_lines(dots, expected, title=titles["sinusoidal-flat-lines"])

    titles = {
        "sinusoidal-flat-lines": f"Sinusoidal: PE[i]·PE[i+d] per distance d (d_model={d_model}, T={FLAT_LENGTH})",
        "sinusoidal-matrix-rows": f"Sinusoidal codes PE ∈ ℝ^(T×d), one row per position (T={MATRIX_LENGTH}, d={d_model})",
        "sinusoidal-matrix-columns": f"Sinusoidal codes P ∈ ℝ^(d×n), one column per position (d={d_model}, n={MATRIX_LENGTH})",
        "sinusoidal-gram": f"Sinusoidal Gram matrix PE_i·PE_j (T={GRAM_LENGTH}, d={d_model})",
        "sinusoidal-wavelengths": f"Sinusoidal wavelengths λ_i = 2π·{base:g}^(2i/{d_model})",
    }
    return [
        FigureSpec(
            "sinusoidal-flat-lines",
            titles["sinusoidal-flat-lines"],
            "One flat line per distance: the dot product of two codes is the same wherever the pair sits, "
            "and equals the closed form Σ_k cos(d·ω_k) (dashed).",
            flat,
        ),
        FigureSpec(
            "sinusoidal-matrix-rows",
            titles["sinusoidal-matrix-rows"],
            "Each row is one position's code: the first dimensions oscillate fast down the rows, later ones "
            "ever more slowly, until the last columns hold sin ≈ 0 and cos ≈ 1 for every position shown.",
            lambda: encoding_matrix(
                code_table(encoding, MATRIX_LENGTH), layout="rows", title=titles["sinusoidal-matrix-rows"]
            ),
        ),
        FigureSpec(
            "sinusoidal-matrix-columns",
            titles["sinusoidal-matrix-columns"],
            "The same numbers as the matrix P of seed 000: each column is one position, each row one "
            "dimension, with sin in the even rows and cos in the odd ones.",
            lambda: encoding_matrix(
                code_table(encoding, MATRIX_LENGTH).T,
                layout="columns",
                title=titles["sinusoidal-matrix-columns"],
            ),
        ),
        FigureSpec(
            "sinusoidal-gram",
            titles["sinusoidal-gram"],
            "Stripes parallel to the diagonal: PE_i·PE_j depends only on i − j (a Toeplitz matrix), largest "
            "(d/2) on the diagonal where i = j.",
            lambda: gram_heatmap(
                gram_matrix(code_table(encoding, GRAM_LENGTH)), title=titles["sinusoidal-gram"]
            ),
        ),
        FigureSpec(
            "sinusoidal-wavelengths",
            titles["sinusoidal-wavelengths"],
            "A straight line on a log axis: the wavelengths grow geometrically from 2π positions for the "
            f"first pair to 2π·{base:g}^({d_model - 2}/{d_model}) ≈ {float(wavelengths(d_model, base)[-1]):,.0f} "
            "for the last.",
            lambda: wavelength_spectrum(wavelengths(d_model, base), title=titles["sinusoidal-wavelengths"]),
        ),
    ]


def _learned() -> list[FigureSpec]:
    encoding = specimen("learned")
    max_len, d_model = encoding.max_len, encoding.d_model
    matrix_title = f"Learned codes at initialisation, one row per position (max_len={max_len}, d={d_model})"
    gram_title = f"Learned Gram matrix at initialisation (T={GRAM_LENGTH}, d={d_model})"
    return [
        FigureSpec(
            "learned-matrix-rows",
            matrix_title,
            f"An untrained table ({encoding.init} init, std {encoding.std:g}) is noise: nothing ties one "
            f"position's row to the next, and there are no rows at all past position {max_len - 1}.",
            lambda: encoding_matrix(code_table(encoding, max_len), layout="rows", title=matrix_title),
        ),
        FigureSpec(
            "learned-gram",
            gram_title,
            "Only the diagonal stands out: untrained codes are nearly orthogonal, with none of the sinusoidal "
            "Gram matrix's stripes; whatever relation between positions the table holds must be learned.",
            lambda: gram_heatmap(gram_matrix(code_table(encoding, GRAM_LENGTH)), title=gram_title),
        ),
    ]


def _rope() -> list[FigureSpec]:
    encoding = specimen("rope")
    rotary_dim, base = encoding.rotary_dim, encoding.base
    vector = torch.zeros(encoding.d_head, dtype=torch.float64)
    first, _ = pair_channels(rotary_dim, encoding.layout)
    vector[first] = 1.0  # every pair starts at (1, 0), so its angle is read off the circle

    def trajectory() -> torch.Tensor:
        return rotation_trajectory(encoding, vector, torch.arange(ROTATION_POSITIONS))  # [n, r/2, 2]

    def flat() -> Figure:
        rows = rotation_trajectory(encoding, vector, torch.arange(FLAT_LENGTH)).flatten(1)  # [T, r]
        dots = dot_by_distance(rows, FLAT_DISTANCES)
        expected = None
        if encoding.scaling is None:
            expected = {distance: float(closed_form_dot(distance, rotary_dim, base)) for distance in dots}
        figure = flat_lines(dots, expected, title=titles["rope-flat-lines"])
        axes = figure.axes[0]
        axes.set_ylabel("q_i · k_(i+d)   (x rotated at i and at i + d)")
        if expected is not None:
            axes.get_legend().set_title("solid: measured\ndashed: Σ_k cos(d·θ_k)")
        return figure

    titles = {
        "rope-inv-freq-scalings": f"RoPE inv_freq per scaling (r={rotary_dim}, base={base:g}, "
        f"{EXAMPLE_FACTOR:g}× of {EXAMPLE_ORIGINAL_LENGTH} positions)",
        "rope-rotation": f"RoPE: one vector rotated at positions 0 … {ROTATION_POSITIONS - 1} (r={rotary_dim})",
        "rope-flat-lines": f"RoPE: q_i·k_(i+d) per distance d for q = k = x (r={rotary_dim}, T={FLAT_LENGTH})",
    }
    return [
        FigureSpec(
            "rope-inv-freq-scalings",
            titles["rope-inv-freq-scalings"],
            "Linear divides every frequency by the factor; NTK, dynamic NTK and LongRoPE stretch the slow "
            "pairs most; YaRN and Llama 3 keep the fast pairs and divide only the slow ones (lower panel).",
            lambda: inv_freq_scalings(
                scaled_inv_freq(rotary_dim, base), title=titles["rope-inv-freq-scalings"]
            ),
        ),
        FigureSpec(
            "rope-rotation",
            titles["rope-rotation"],
            "Each pair of the vector turns on a circle of fixed radius, by θ_k per position: pair 0 by one "
            "radian, the slowest pair barely at all. Rotation keeps the norm.",
            lambda: rotating_vector(trajectory(), inv_freq=encoding.inv_freq, title=titles["rope-rotation"]),
        ),
        FigureSpec(
            "rope-flat-lines",
            titles["rope-flat-lines"],
            "Flat lines: the rotated q·k depends only on the distance, and for unit pairs equals Σ_k cos(d·θ_k) "
            "(dashed), the closed form of the sinusoidal codes' dot product.",
            flat,
        ),
    ]


def _alibi() -> list[FigureSpec]:
    encoding = specimen("alibi")
    heads_title = (
        f"ALiBi bias per head (n_heads={encoding.n_heads}, {'symmetric' if encoding.symmetric else 'causal'})"
    )
    lines_title = f"ALiBi bias against distance, one line per head (n_heads={encoding.n_heads})"
    distances = torch.arange(0, 2 * BIAS_POSITIONS + 1)
    return [
        FigureSpec(
            "alibi-bias-heads",
            heads_title,
            "−m_h·(i − j) on one colour scale: head 0 falls off fastest, the last head barely at all. Keys "
            "after the query (above the diagonal) get a positive bias that the causal mask removes.",
            lambda: bias_heads(bias_matrix(encoding, BIAS_POSITIONS), title=heads_title),
        ),
        FigureSpec(
            "alibi-bias-distance",
            lines_title,
            f"Straight lines through 0 with slope −m_h per head, from m = {float(encoding.slopes[0]):g} down to "
            f"{float(encoding.slopes[-1]):g}: no learned parameters, and the same penalty per step of distance at any length.",
            lambda: distance_bias(distances, bias_by_distance(encoding, distances), title=lines_title),
        ),
    ]


def _t5() -> list[FigureSpec]:
    encoding = specimen("t5")
    num_buckets, max_distance = encoding.num_buckets, encoding.max_distance
    relative = torch.arange(-(max_distance + 32), max_distance + 33)
    buckets_title = f"T5 buckets (num_buckets={num_buckets}, max_distance={max_distance})"
    table_title = f"T5 bias table [bucket, head] at initialisation (n_heads={encoding.n_heads})"
    heads_title = f"T5 bias per head at initialisation ({BIAS_POSITIONS} positions)"
    return [
        FigureSpec(
            "t5-buckets",
            buckets_title,
            "One bucket per distance up to half the buckets of a side, then logarithmically wider buckets, "
            f"and one shared bucket from distance {max_distance} on; causal buckets count only keys before the query.",
            lambda: bucket_map(
                relative,
                t5_bucket_map(relative, num_buckets=num_buckets, max_distance=max_distance),
                title=buckets_title,
            ),
        ),
        FigureSpec(
            "t5-table",
            table_title,
            "The learned values, here as initialised (random normal, small): training sets them; the bucket "
            "map decides which pairs of positions share one.",
            lambda: bucket_table(encoding.table.detach().to(torch.float64), title=table_title),
        ),
        FigureSpec(
            "t5-bias-heads",
            heads_title,
            "Bands parallel to the diagonal, narrow near it and ever wider away from it: pairs in one bucket "
            "share a bias, so the bias depends only on the (bucketed) distance j − i.",
            lambda: bias_heads(bias_matrix(encoding, BIAS_POSITIONS), title=heads_title),
        ),
    ]


def _swin() -> list[FigureSpec]:
    encoding = specimen("swin")
    tokens = encoding.relative_index.shape[0]
    table_title = f"Swin bias table per head by 2-D offset at initialisation (window {encoding.window})"
    heads_title = (
        f"Swin bias per head over the {tokens} tokens of a {encoding.window}×{encoding.window} window"
    )
    return [
        FigureSpec(
            "swin-table-heads",
            table_title,
            "One learned value per (dy, dx) offset between two tokens of the window, here as initialised "
            "(truncated normal, small); offset (0, 0) is the centre.",
            lambda: offset_tables(swin_offset_table(encoding), title=table_title),
        ),
        FigureSpec(
            "swin-bias-heads",
            heads_title,
            "Repeating blocks: tokens are numbered row by row, and a pair's bias depends only on its row "
            "offset (which block) and column offset (where in the block).",
            lambda: bias_heads(bias_matrix(encoding, tokens), title=heads_title),
        ),
    ]


def _nope() -> list[FigureSpec]:
    title = "NoPE: attention-logit change when every position shifts by Δ"
    return [
        FigureSpec(
            "nope-logit-shift",
            title,
            "Every change is exactly 0: NoPE never reads positions, so shifting them moves no logit. Order "
            "can reach a NoPE model only through the causal mask.",
            lambda: logit_shift({"nope": logit_shift_change(specimen("nope"))}, title=title),
        ),
    ]


def _comparison() -> list[FigureSpec]:
    shift_title = "Attention-logit change when every position shifts by Δ, per encoding"
    rope = specimen("rope")
    error_title = f"cos/sin error against position, RoPE inv_freq (r={rope.rotary_dim}, base={rope.base:g})"

    def errors() -> Figure:
        inv_freq = rope.inv_freq  # [r/2] float64
        values = {recipe: angle_error(recipe, ERROR_POSITIONS, inv_freq) for recipe in RECIPES}
        return angle_errors(ERROR_POSITIONS, values, title=error_title)

    return [
        FigureSpec(
            "comparison-logit-shift",
            shift_title,
            "Relative encodings (RoPE, ALiBi, T5, Swin inside its window) and NoPE stay at float64 rounding "
            "or exactly 0; the absolute ones (sinusoidal, learned) move the logits far above rounding, the "
            "learned table less only because its initial codes are small.",
            lambda: logit_shift(
                {name: logit_shift_change(specimen(name)) for name in available()}, title=shift_title
            ),
        ),
        FigureSpec(
            "comparison-angle-error",
            error_title,
            "float32 angles (position × inv_freq in float32) lose accuracy in proportion to the position, "
            "about 1e-2 by 2^20; posenc's exact angles stay within one float32 rounding (2⁻²⁵) at every position.",
            errors,
        ),
    ]


#: gallery name -> the function listing its figures; one entry per registered encoding, plus "comparison".
GALLERY: dict[str, Callable[[], list[FigureSpec]]] = {
    "alibi": _alibi,
    "learned": _learned,
    "nope": _nope,
    "rope": _rope,
    "sinusoidal": _sinusoidal,
    "swin": _swin,
    "t5": _t5,
    "comparison": _comparison,
}


def names() -> list[str]:
    """The gallery names: every registered encoding that has figures, then ``"comparison"``."""
    return list(GALLERY)


def figures(name: str) -> list[FigureSpec]:
    """The figures of one gallery name, unbuilt (call ``spec.build()`` for the Figure).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if name not in GALLERY:
        raise ValueError(f"unknown gallery name {name!r}; valid: {', '.join(names())}")
    return GALLERY[name]()
