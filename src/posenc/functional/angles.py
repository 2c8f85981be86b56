"""Exact rotation angles pos·ω for integer positions, reduced modulo 2π before any sine is taken.

Every position encoding built on sines (sinusoidal tables, RoPE) needs sin and cos of
pos·ω. The usual recipe multiplies a float32 position by a float32 frequency: at
pos = 2^20 the product has an absolute error near 0.06 rad, and cos loses its second
digit. Even float64 leaves ~5e-10 rad at 2^21, far from one rounding of float64.

Here the frequency ω and 2π are each written as a sum of float64 pieces of at most
26 significant bits. For an integer |pos| < 2^27 every product pos·piece is exact, so

    pos·ω − n·2π = (pos·ω₀ − n·T₀) + Σ_p (pos·ω_p − n·T_p),   n = round(pos·(ω₀ + ω₁) / 2π),

where the first bracket is computed exactly (both terms lie on a common grid fine
enough to hold their difference) and the remaining exact products are added in
float64. The result is an angle in [−π, π] (up to 1e-7) with an absolute error of a
few 1e-16 for frequencies up to 1, whatever the position: the float64 sine of it is
within a few float64 roundings of the exact value, and casting once gives every smaller
dtype its correctly rounded value except in ties at the last bit.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import torch

from posenc._validation import as_positions, check_on_device

#: Largest |position| (exclusive) for which the angle is exact.
MAX_POSITION = 2**27

PIECE_BITS = 26
N_PIECES = 4
_DECIMAL_DIGITS = 60
_TWO_PI = Decimal(
    "6.28318530717958647692528676655900576839433879875021164194988918461563281257241799725606965"
)


def _truncate(x: float, bits: int) -> float:
    """The leading `bits` significant bits of x (an exact operation)."""
    if x == 0.0:
        return 0.0
    mantissa, exponent = math.frexp(x)
    return math.ldexp(math.trunc(math.ldexp(mantissa, bits)), exponent - bits)


def split_exact(value: Decimal | float | int) -> tuple[float, ...]:
    """`value` as N_PIECES float64 numbers of ≤ PIECE_BITS bits each, summing to it within ~2^-104."""
    with localcontext() as context:
        context.prec = _DECIMAL_DIGITS
        rest = Decimal(value)
        pieces = []
        for _ in range(N_PIECES):
            piece = _truncate(float(rest), PIECE_BITS)
            pieces.append(piece)
            rest -= Decimal(piece)
    return tuple(pieces)


def split_frequencies(frequencies: torch.Tensor) -> torch.Tensor:
    """Float64 frequencies [f] as exact pieces [f, N_PIECES] (a float64 needs three of the four)."""
    rest = frequencies.to(torch.float64)
    pieces = []
    for _ in range(N_PIECES):
        mantissa, exponent = torch.frexp(rest)
        piece = torch.ldexp(
            torch.trunc(torch.ldexp(mantissa, torch.tensor(PIECE_BITS))), exponent - PIECE_BITS
        )
        pieces.append(piece)
        rest = rest - piece  # exact: piece holds the leading bits of rest
    return torch.stack(pieces, dim=-1)


_TWO_PI_PIECES = split_exact(_TWO_PI)
_INV_TWO_PI = float(1 / _TWO_PI)


def reduced_angles(
    positions: torch.Tensor, frequency_pieces: torch.Tensor, *, per_frequency: bool = False
) -> torch.Tensor:
    """Angles congruent to pos·ω modulo 2π, in [−π, π] up to 1e-7, exact to a few 1e-16 (ω ≤ 1).

    Args:
        positions: integer tensor of any shape ``[...]`` with |pos| < MAX_POSITION (``[..., f]``, one
            per frequency, with ``per_frequency``).
        frequency_pieces: float64 ``[f, N_PIECES]`` from :func:`split_exact` or
            :func:`split_frequencies`; row k sums to ω_k.

    Returns:
        float64 ``[..., f]``.
    """
    positions = as_positions(positions)
    if torch.compiler.is_compiling():  # reading a value would be a data-dependent guard in the graph
        check_on_device(
            positions.abs() < MAX_POSITION, f"positions must satisfy |position| < 2^27 = {MAX_POSITION}"
        )
        return reduced_angles_unchecked(positions, frequency_pieces, per_frequency=per_frequency)
    largest = int(positions.abs().max())
    if largest >= MAX_POSITION:
        raise ValueError(
            f"positions must satisfy |position| < 2^27 = {MAX_POSITION} for exact angles, got {largest}"
        )
    return reduced_angles_unchecked(positions, frequency_pieces, per_frequency=per_frequency)


def reduced_angles_unchecked(
    positions: torch.Tensor, frequency_pieces: torch.Tensor, *, per_frequency: bool = False
) -> torch.Tensor:
    """:func:`reduced_angles` without the checks (no host synchronisation): tensor ops only, for
    compiled graphs. Positions must be integers with |pos| < MAX_POSITION.

    ``per_frequency``: positions ``[..., f]`` give frequency k its own position (the coordinate of the
    axis it turns with, for RoPE on several axes) instead of one position ``[...]`` for every frequency.
    """
    pos = positions.to(torch.float64)  # exact
    pos = pos if per_frequency else pos.unsqueeze(-1)  # [..., f] or [..., 1]
    pieces = frequency_pieces.to(device=pos.device, dtype=torch.float64).T.contiguous()  # [P, f]
    # Whole turns from the float64 product pos·ω, within 1e-7 of the exact turn count, so the
    # result lands in [−π, π] up to that; |n| < 2^25, so every n·T_p is exact.
    turns = (pos * pieces.sum(dim=0)).mul_(_INV_TWO_PI).round_()  # [..., f]
    angle = (pos * pieces[0]).add_(turns, alpha=-_TWO_PI_PIECES[0])  # exact: its bits fit in 53
    # Each product below is exact (≤ 53 bits), so every update rounds once, at the sum.
    for p in range(1, pieces.shape[0]):
        angle.addcmul_(pos, pieces[p]).add_(turns, alpha=-_TWO_PI_PIECES[p])
    return angle


def exact_cos_sin(
    positions: torch.Tensor, frequency_pieces: torch.Tensor, *, per_frequency: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos·ω in float64 ``[..., f]``, each within a few float64 roundings of exact."""
    angle = reduced_angles(positions, frequency_pieces, per_frequency=per_frequency)
    return torch.cos(angle), torch.sin(angle)


def coordinate_angles(
    positions: torch.Tensor, frequency_pieces: torch.Tensor, axis: torch.Tensor
) -> torch.Tensor:
    """Angles of positions on several axes: frequency k turns with coordinate ``axis[k]``; float64 ``[..., f]``.

    Integer coordinates give exact angles (reduced as :func:`reduced_angles`); float coordinates are
    used as given and reduced as exactly (:func:`reduced_float_angles`).

    Args:
        positions: ``[..., n]`` coordinates (int64 or float64) with |pos| < MAX_POSITION.
        frequency_pieces: float64 ``[f, N_PIECES]``.
        axis: int64 ``[f]``, each in 0 … n − 1.
    """
    per_frequency = positions[..., axis.to(positions.device)]  # [..., f]: each frequency's coordinate
    if per_frequency.dtype.is_floating_point:
        return reduced_float_angles(per_frequency, frequency_pieces)
    if torch.compiler.is_compiling():
        return reduced_angles_unchecked(per_frequency, frequency_pieces, per_frequency=True)
    return reduced_angles(per_frequency, frequency_pieces, per_frequency=True)


#: Veltkamp's splitter for float64: x·(2^27 + 1) splits x into two halves of at most 26 bits each.
_SPLITTER = float(2**27 + 1)


def split_coordinates(coordinates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 coordinates as ``(high, low)`` with high + low = x exactly, each of at most 26 significant
    bits (Veltkamp's split: multiplications and subtractions only, so it compiles), for |x| < 2^996."""
    scaled = coordinates * _SPLITTER
    high = scaled - (scaled - coordinates)
    return high, coordinates - high


def reduced_float_angles(coordinates: torch.Tensor, frequency_pieces: torch.Tensor) -> torch.Tensor:
    """Angles congruent to x·ω_k modulo 2π for float coordinates, reduced as exactly as integers are.

    The coordinate (float64, each value as given) is split into two halves of ≤ 26 bits
    (:func:`split_coordinates`), so every product of a half with a frequency piece is exact; the whole
    turns n are taken out of the leading product exactly, as :func:`reduced_angles_unchecked` does for
    integers, and the remaining exact products are added in float64. The result lies in [−π, π] (up
    to 1e-7) within a few float64 roundings of the exact angle of the float64 coordinate, where the
    float64 product x·ω alone is off by |x·ω|·2^-53 (1e-10 rad at 10^6). Tensor ops only (compiles).

    Args:
        coordinates: float ``[..., f]``, frequency k's coordinate in column k, |x·ω| < 2^27.
        frequency_pieces: float64 ``[f, N_PIECES]``.

    Returns:
        float64 ``[..., f]``.
    """
    x = coordinates.to(torch.float64)
    pieces = frequency_pieces.to(device=x.device, dtype=torch.float64).T.contiguous()  # [P, f]
    high, low = split_coordinates(x)
    turns = (x * pieces.sum(dim=0)).mul_(_INV_TWO_PI).round_()  # [..., f]
    angle = (high * pieces[0]).add_(turns, alpha=-_TWO_PI_PIECES[0])  # exact: the turns cancel its bits
    angle.addcmul_(low, pieces[0])
    for p in range(1, pieces.shape[0]):
        angle.addcmul_(high, pieces[p]).addcmul_(low, pieces[p]).add_(turns, alpha=-_TWO_PI_PIECES[p])
    return angle
