"""Attention logits through an encoding's own hooks, and how much they move when every position shifts.

This is the measured "Relative Position" column of seed 004's table (§7): an encoding carries
relative position explicitly when the logits q_i·k_j + b_ij are unchanged by adding the same
constant to every position, whatever q and k are.
"""

from __future__ import annotations

import copy
import math

import torch

from posenc._validation import as_coordinates, as_positions, check_int, check_positive_int
from posenc.encodings import PositionalEncoding
from posenc.encodings.views import translations

#: Widths of the probe for an encoding that keeps none of its own (``d_model``, ``n_heads``, ``d_head`` None).
PROBE_WIDTHS = {"d_model": 32, "n_heads": 2, "d_head": 16}


def probe_widths(encoding: PositionalEncoding) -> dict[str, int]:
    """``{"d_model", "n_heads", "d_head"}``: the encoding's own sizes where it keeps them, else ``PROBE_WIDTHS``."""
    own = {"d_model": encoding.d_model, "n_heads": encoding.n_heads, "d_head": encoding.d_head}
    return {name: own[name] or PROBE_WIDTHS[name] for name in PROBE_WIDTHS}


def attention_logits(
    encoding: PositionalEncoding,
    positions: torch.Tensor,
    *,
    d_model: int | None = None,
    n_heads: int | None = None,
    d_head: int | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """Logits ``[h, s, s]`` of one attention layer over random tokens, in float64, through every hook.

    x ``[1, s, d]`` and the projections are drawn from ``seed`` and do not depend on the positions,
    so two calls with different positions differ only by what the encoding does with them:
    ``e = embed(x)``, ``q, k = rotate(e·W_q, e·W_k)``, logits ``= q·kᵀ/√d_head + bias + score_terms``
    (+ the ``content_terms`` of what the encoding reads of e, for FoX or PaTH).
    Widths default to the encoding's own (``d_model``, ``n_heads``, ``d_head``), else 32 / 2 / 16
    (:func:`probe_widths`).
    """
    columns = encoding.position_space.columns
    positions = as_positions(positions) if columns == 1 else as_coordinates(positions, columns)
    encoding = copy.deepcopy(encoding).to(torch.float64)
    widths = probe_widths(encoding)
    d_model = check_positive_int("d_model", d_model or widths["d_model"])
    n_heads = check_positive_int("n_heads", n_heads or widths["n_heads"])
    d_head = check_positive_int("d_head", d_head or widths["d_head"])
    generator = torch.Generator().manual_seed(seed)
    seq_len = positions.shape[0]  # positions [s] (or [s, n] on n axes)
    x = torch.randn(1, seq_len, d_model, generator=generator, dtype=torch.float64)  # [1, s, d]
    with torch.no_grad():
        e = encoding.embed(x, positions)  # [1, s, d']
        width = e.shape[-1]
        w_q, w_k = torch.randn(2, width, n_heads * d_head, generator=generator, dtype=torch.float64)
        w_q, w_k = w_q / math.sqrt(width), w_k / math.sqrt(width)
        q = (e @ w_q).view(1, seq_len, n_heads, d_head).transpose(1, 2)  # [1, h, s, d_head]
        k = (e @ w_k).view(1, seq_len, n_heads, d_head).transpose(1, 2)
        q, k = encoding.rotate(q, k, positions, positions)
        logits = q @ k.transpose(-1, -2) / math.sqrt(d_head)  # [1, h, s, s]
        bias = encoding.bias(positions, positions)
        if bias is not None:
            logits = logits + bias.to(torch.float64)
        terms = encoding.score_terms(q, k, positions, positions)  # terms that read q and k
        if terms is not None:
            logits = logits + terms.to(torch.float64)
        content = encoding.content(e)  # [1, s, c]: what it reads of each token (FoX's gates), or None
        terms = None if content is None else encoding.content_terms(q, k, content, content)
        if terms is not None:
            logits = logits + terms.to(torch.float64)
    return logits[0]


def _shift(shift) -> int | tuple[int, ...]:
    """A shift of every position: an int on one axis, a tuple of ints (one per axis) on several."""
    if isinstance(shift, tuple):
        return tuple(check_int("shift", part) for part in shift)
    return check_int("shift", shift)


def shift_plan(encoding: PositionalEncoding, shifts=None, seq_len: int = 16) -> tuple[torch.Tensor, tuple]:
    """The positions ``[s]`` and shifts at which ``logit_shift_change`` measures ``encoding``: the
    encoding's own ``translations`` (0 … seq_len − 1 shifted by 1, 7 and 100, kept inside a table;
    Swin's half row moved along a row or down rows; a grid ``[s, n]`` moved by vectors on n axes), or
    the ``shifts`` given, checked by it."""
    shifts = None if shifts is None else tuple(_shift(s) for s in shifts)
    return translations(encoding, check_positive_int("seq_len", seq_len), shifts)


def logit_shift_change(encoding: PositionalEncoding, shifts=None, *, seq_len: int = 16, seed: int = 0):
    """``{Δ: max |logits(p + Δ) − logits(p)| / max |logits(p)|}`` over random tokens and projections.

    0 at float64 rounding (~1e-16) when attention sees only relative position (RoPE, ALiBi, T5,
    Swin within its window, and NoPE, which sees no position); of order 1 for absolute encodings.
    """
    positions, shifts = shift_plan(encoding, shifts, seq_len)
    reference = attention_logits(encoding, positions, seed=seed)
    return {
        shift: _change(attention_logits(encoding, positions + torch.tensor(shift), seed=seed), reference)
        for shift in shifts
    }


def _change(moved: torch.Tensor, reference: torch.Tensor) -> float:
    """max |moved − reference| / max |reference| over the finite logits; a logit that is −inf (a key an
    encoding hides itself, as stick-breaking hides those after the query) must stay so, else inf."""
    finite = reference.isfinite()
    if not torch.equal(finite, moved.isfinite()) or not torch.equal(moved[~finite], reference[~finite]):
        return float("inf")
    return float((moved[finite] - reference[finite]).abs().max()) / float(reference[finite].abs().max())


def position_sensitivity(encoding: PositionalEncoding, *, seq_len: int = 16, seed: int = 0) -> float:
    """max |logits(shuffled positions) − logits(positions)| / max |logits|: 0 when position is unseen.

    The positions are shuffled by a fixed random permutation, not reversed: reversing keeps every
    |i − j|, so a symmetric bias of the distance would look blind to position.
    """
    positions, _ = shift_plan(encoding, (), seq_len)
    generator = torch.Generator().manual_seed(seed)
    shuffled = positions[torch.randperm(positions.shape[0], generator=generator)]
    reference = attention_logits(encoding, positions, seed=seed)
    return _change(attention_logits(encoding, shuffled, seed=seed), reference)
