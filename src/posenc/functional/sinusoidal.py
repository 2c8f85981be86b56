"""The sinusoidal position table of "Attention Is All You Need" (Vaswani et al., 2017), on one axis or several.

PE[pos, 2k]   = sin(pos·ω_k)
PE[pos, 2k+1] = cos(pos·ω_k),     ω_k = base^(−2k/d_model),  k = 0 … d_model/2 − 1

On n axes (images, video) each axis gets d_model/n channels, coded with its own coordinate:
``layout="mae"`` as MAE (He et al., 2022) and diffusers' ``get_2d_sincos_pos_embed``, ``"axes"`` with
the code above per axis.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from decimal import Decimal, localcontext

import torch

from posenc._validation import (
    as_coordinates,
    as_positions,
    check_choice,
    check_even_positive_int,
    check_float_dtype,
    check_positive_float,
)
from posenc.functional.angles import (
    MAX_POSITION,
    exact_cos_sin,
    reduced_angles_unchecked,
    reduced_float_angles,
    split_exact,
)

LAYOUTS = ("rows", "columns")
#: Layouts of a table of positions on several axes (the last dimension of the positions).
AXIS_LAYOUTS = ("mae", "axes")


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
            On several axes, positions ``[..., s, n]`` (integer: exact; float: used as given, angles
            reduced as exactly) and ``[..., s, d_model]`` codes: ``"mae"``, MAE's 2-D table (d/n channels per
            axis, the last axis first as MAE's meshgrid puts w before h, sines then cosines in each),
            or ``"axes"``, the code above per axis (axes in order).

    Raises:
        ValueError: odd or non-positive ``d_model``, non-positive length or ``base``,
            non-integer positions (on one axis), unknown ``layout``; on several axes a ``d_model`` that
            does not split into an even width per axis, non-finite coordinates.
        TypeError: a non-float ``dtype``.
    """
    d_model = check_even_positive_int("d_model", d_model)
    base = check_positive_float("base", base)
    layout = check_choice("layout", layout, LAYOUTS + AXIS_LAYOUTS)
    check_float_dtype("dtype", dtype)
    if layout in AXIS_LAYOUTS:
        positions = as_coordinates(positions_or_length, _axis_count(positions_or_length))
        if not positions.is_floating_point() and int(positions.abs().max()) >= MAX_POSITION:
            raise ValueError(
                f"integer coordinates must satisfy |position| < 2^27, got {int(positions.abs().max())}"
            )
        return axis_codes(positions, d_model, base=base, layout=layout).to(dtype)
    positions = as_positions(positions_or_length)
    cos, sin = exact_cos_sin(positions, sinusoidal_frequency_pieces(d_model, base))  # [..., d/2] each
    table = torch.stack((sin, cos), dim=-1).flatten(-2).to(dtype)  # [..., d], sin at 2k, cos at 2k+1
    if positions.dim() == 0:
        table = table.unsqueeze(0)
    if layout == "columns":
        table = table.transpose(-1, -2).contiguous()
    return table


def _axis_count(positions: object) -> int:
    """The number of coordinate columns of positions on several axes (their last dimension)."""
    shape = getattr(positions, "shape", None)
    if shape is None:
        shape = torch.as_tensor(positions).shape
    if len(shape) < 2:
        raise ValueError(f"positions on several axes must be [..., s, n], got shape {tuple(shape)}")
    return shape[-1]


def axis_codes(
    positions: torch.Tensor,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "mae",
    pieces: torch.Tensor | None = None,
) -> torch.Tensor:
    """float64 codes ``[..., s, d_model]`` of positions ``[..., s, n]`` on n axes (checked coordinates).

    Each axis a codes its coordinate with D = d_model/n channels and ω_k = base^(−2k/D): ``"mae"``
    [sin(p·ω_0) … sin(p·ω_{D/2−1}), cos(p·ω_0) …] per axis, the last axis first; ``"axes"`` the
    interleaved code per axis, the first axis first. Tensor ops only (the checks are the caller's);
    ``pieces``: one axis's frequencies (:func:`sinusoidal_frequency_pieces` of D), computed outside
    a compiled graph.
    """
    n = positions.shape[-1]
    if d_model % (2 * n):
        raise ValueError(f"d_model={d_model} does not split into an even width for each of {n} axes")
    pieces = sinusoidal_frequency_pieces(d_model // n, base) if pieces is None else pieces  # [D/2, 4]
    order = range(n - 1, -1, -1) if layout == "mae" else range(n)
    codes = []
    for a in order:
        coordinate = positions[..., a]  # [..., s]
        if coordinate.is_floating_point():
            shape = (*coordinate.shape, pieces.shape[0])
            angle = reduced_float_angles(coordinate[..., None].expand(shape), pieces)  # [..., s, D/2]
        else:
            angle = reduced_angles_unchecked(coordinate, pieces)
        sin, cos = angle.sin(), angle.cos()
        codes.append(
            torch.cat((sin, cos), -1) if layout == "mae" else torch.stack((sin, cos), -1).flatten(-2)
        )
    return torch.cat(codes, dim=-1)
