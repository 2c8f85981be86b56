"""The sinusoidal position table of "Attention Is All You Need" (Vaswani et al., 2017).

PE[pos, 2k]   = sin(pos·ω_k)
PE[pos, 2k+1] = cos(pos·ω_k),     ω_k = base^(−2k/d_model),  k = 0 … d_model/2 − 1
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from decimal import Decimal, localcontext

import torch

from posenc._validation import (
    as_positions,
    check_choice,
    check_even_positive_int,
    check_float_dtype,
    check_positive_float,
)
from posenc.functional.angles import exact_cos_sin, split_exact

LAYOUTS = ("rows", "columns")


@functools.lru_cache(maxsize=64)
def sinusoidal_frequency_pieces(d_model: int, base: float) -> torch.Tensor:
    """ω_k = base^(−2k/d) to 60 digits, as exact float64 pieces [d/2, 4] (CPU)."""
    with localcontext() as context:
        context.prec = 60
        log_base = Decimal(base).ln()
        rows = [split_exact((-(Decimal(2 * k) / d_model) * log_base).exp()) for k in range(d_model // 2)]
    return torch.tensor(rows, dtype=torch.float64)


def sinusoidal_frequencies(d_model: int, *, base: float = 10000.0) -> torch.Tensor:
    """Angular frequencies ω_k = base^(−2k/d_model), k = 0 … d_model/2 − 1, float64 ``[d_model/2]``.

    The wavelength of pair k is 2π/ω_k = 2π·base^(2k/d_model).
    """
    d_model = check_even_positive_int("d_model", d_model)
    base = check_positive_float("base", base)
    return sinusoidal_frequency_pieces(d_model, base).sum(dim=-1)


def sinusoidal_table(
    positions_or_length: int | torch.Tensor | Iterable[int],
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    layout: str = "rows",
) -> torch.Tensor:
    """The sinusoidal position table (Vaswani et al., 2017, §3.5).

    Angles are reduced exactly from the integer positions (see :mod:`posenc.functional.angles`),
    sines are taken in float64 and cast once, so every value is within one rounding of
    ``dtype`` of the exact value for |position| < 2^27.

    Args:
        positions_or_length: an int T (positions 0 … T−1) or integer positions of any shape ``[...]``.
        d_model: width of each code; even, one sin/cos pair per frequency.
        base: the wavelength base (10000 in the paper).
        dtype: output dtype.
        layout: ``"rows"`` gives ``[..., T, d_model]``, one row per position (seed 003's T×d);
            ``"columns"`` gives ``[..., d_model, T]``, one column per position (the d×n matrix P).

    Raises:
        ValueError: odd or non-positive ``d_model``, non-positive length or ``base``,
            non-integer positions, unknown ``layout``.
        TypeError: a non-float ``dtype``.
    """
    d_model = check_even_positive_int("d_model", d_model)
    base = check_positive_float("base", base)
    layout = check_choice("layout", layout, LAYOUTS)
    check_float_dtype("dtype", dtype)
    positions = as_positions(positions_or_length)
    cos, sin = exact_cos_sin(positions, sinusoidal_frequency_pieces(d_model, base))  # [..., d/2] each
    table = torch.stack((sin, cos), dim=-1).flatten(-2).to(dtype)  # [..., d], sin at 2k, cos at 2k+1
    if positions.dim() == 0:
        table = table.unsqueeze(0)
    if layout == "columns":
        table = table.transpose(-1, -2).contiguous()
    return table
