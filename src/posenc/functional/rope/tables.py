"""cos and sin of RoPE's angles, exact from integer positions (reduced modulo 2π before any sine)."""

from __future__ import annotations

import torch

from posenc._validation import (
    as_coordinates,
    as_positions,
    check_float_dtype,
    check_float_tensor,
    check_positive_float,
)
from posenc.functional.angles import coordinate_angles, exact_cos_sin, split_frequencies
from posenc.functional.rope.axes import check_frequency_axes


def rope_cos_sin(
    positions: torch.Tensor | int,
    inv_freq: torch.Tensor,
    *,
    dtype: torch.dtype = torch.float32,
    attention_factor: float = 1.0,
    axis: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos·θ_k (times ``attention_factor``), exact from integer positions, cast once.

    The angle is reduced modulo 2π exactly (:mod:`posenc.functional.angles`) from the float64
    frequencies, so float32 values are within one rounding of the exact ones at any position < 2^27.
    On several axes (``axis`` given) frequency k turns with coordinate ``axis[k]`` of each position:
    integer coordinates stay exact, float ones are used as given with their angles reduced as exactly
    (:func:`~posenc.functional.angles.reduced_float_angles`).

    Args:
        positions: integer positions ``[s]`` or ``[b, s]`` (or an int length); with ``axis``,
            coordinates ``[s, n]`` or ``[b, s, n]``, integer or float.
        inv_freq: frequencies ``[r/2]`` (any float dtype; used as float64).
        axis: the axis of each frequency, int ``[r/2]`` (from :func:`rope_axial_frequencies` or
            :func:`rope_section_axes`); None for one axis.

    Returns:
        ``(cos, sin)``, each ``[..., s, r/2]`` in ``dtype``.

    Raises:
        ValueError: non-integer positions on one axis, coordinates without a column for every axis
            named in ``axis``, non-finite coordinates, ``inv_freq`` not 1-d or of another length than
            ``axis``, an attention factor that is not positive and finite.
        TypeError: a non-float ``dtype`` or ``inv_freq`` (integer, bool or complex).
    """
    check_float_dtype("dtype", dtype)
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.dim() != 1:
        raise ValueError(f"inv_freq must be a 1-d tensor [r/2], got {getattr(inv_freq, 'shape', inv_freq)}")
    check_float_tensor("inv_freq", inv_freq)
    if not torch.compiler.is_compiling():
        bad = inv_freq[~torch.isfinite(inv_freq)]
        if bad.numel():
            raise ValueError(f"inv_freq must be finite, got {float(bad[0])}")
    attention_factor = check_positive_float("attention_factor", attention_factor)
    pieces = split_frequencies(inv_freq.to(torch.float64))
    if axis is not None:
        axis = check_frequency_axes(axis, inv_freq.shape[0])
    return cos_sin_of_pieces(positions, pieces, dtype=dtype, attention_factor=attention_factor, axis=axis)


def cos_sin_of_pieces(
    positions: torch.Tensor | int,
    frequency_pieces: torch.Tensor,
    *,
    dtype: torch.dtype,
    attention_factor: float,
    axis: torch.Tensor | None = None,
    axes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_cos_sin` from frequencies already split into exact pieces ``[r/2, P]``
    (:func:`posenc.functional.angles.split_frequencies`) and an ``axis`` already checked: what a module
    that keeps its frequencies calls, so that a compiled graph holds no split (inductor's CPU code for
    ``frexp`` does not build) and no host read. ``axes``: the number of coordinate axes (default
    ``axis.max() + 1``, a host read)."""
    if axis is None:
        cos, sin = exact_cos_sin(as_positions(positions), frequency_pieces)  # [..., r/2] float64
    else:
        axes = int(axis.max()) + 1 if axes is None else axes
        positions = as_coordinates(positions, axes)  # [..., s, n]
        angle = coordinate_angles(positions, frequency_pieces, axis)  # [..., s, r/2]
        cos, sin = torch.cos(angle), torch.sin(angle)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


__all__ = [
    "cos_sin_of_pieces",
    "rope_cos_sin",
]
