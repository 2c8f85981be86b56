"""Dot products of position codes, and the claim of seeds 000/002 that they depend only on distance.

For the sinusoidal table, PE[i]·PE[i+d] = Σ_k [sin(iω_k)sin((i+d)ω_k) + cos(iω_k)cos((i+d)ω_k)]
= Σ_k cos(d·ω_k): a function of the distance d alone. These functions measure it on any
table ``[T, d_model]`` (one row per position), accumulating in float64 so that what is
measured is the table's own error, not the error of the measurement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import torch

from posenc._validation import (
    as_positions,
    check_even_positive_int,
    check_int,
    check_positive_float,
)
from posenc.functional.angles import exact_cos_sin
from posenc.functional.sinusoidal import sinusoidal_frequency_pieces


def _check_table(table: torch.Tensor) -> torch.Tensor:
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"table must be a [T, d] tensor with one row per position, got {shape}")
    return table.to(torch.float64)


def gram_matrix(table: torch.Tensor) -> torch.Tensor:
    """G[i, j] = PE[i]·PE[j], float64 ``[T, T]``; Toeplitz when codes depend only on distance."""
    table = _check_table(table)  # [T, d]
    return table @ table.T  # [T, T]


def dot_by_distance(table: torch.Tensor, distances: Iterable[int]) -> dict[int, torch.Tensor]:
    """For each distance d: the values PE[i]·PE[i+d] for every valid start i = 0 … T−d−1.

    Returns:
        ``{d: float64 [T − d]}``, in the order the distances were given.

    Raises:
        ValueError: a distance outside 0 … T−1.
    """
    table = _check_table(table)  # [T, d]
    length = table.shape[0]
    dots = {}
    for distance in distances:
        distance = check_int("distance", distance)
        if not 0 <= distance < length:
            raise ValueError(
                f"distance must be in 0 … {length - 1} for a table of {length} positions, got {distance}"
            )
        dots[distance] = (table[: length - distance] * table[distance:]).sum(dim=-1)  # [T - d]
    return dots


def closed_form_dot(
    distance: int | torch.Tensor | Iterable[int], d_model: int, base: float = 10000.0
) -> torch.Tensor:
    """Σ_k cos(distance·ω_k), ω_k = base^(−2k/d_model): the sinusoidal code dot product at that distance.

    Angles are reduced exactly, so the value is correct to float64 at any distance < 2^27.
    Returns a float64 tensor shaped like ``distance`` (a 0-d tensor for an int).
    """
    d_model = check_even_positive_int("d_model", d_model)
    base = check_positive_float("base", base)
    if isinstance(distance, int) and not isinstance(distance, bool):
        distance = torch.tensor(distance)  # a single distance, not a length
    distances = as_positions(distance)
    cos, _ = exact_cos_sin(distances, sinusoidal_frequency_pieces(d_model, base))  # [..., d/2]
    return cos.sum(dim=-1)


@dataclass(frozen=True)
class DistanceSummary:
    """Translation invariance at one distance: how much PE[i]·PE[i+d] varies with i."""

    distance: int
    pairs: int  # number of starts i
    mean: float
    spread: float  # max − min over i: 0 when the dot product depends on distance only
    expected: float | None  # the closed form, when one is given
    max_deviation: float | None  # max_i |PE[i]·PE[i+d] − expected|

    def as_dict(self) -> dict:
        return asdict(self)


def translation_invariance(
    dots: Mapping[int, torch.Tensor], expected: Mapping[int, float] | None = None
) -> list[DistanceSummary]:
    """Summarise ``dot_by_distance`` output per distance, against ``expected`` values when given."""
    summaries = []
    for distance, values in dots.items():
        values = values.to(torch.float64)
        target = None if expected is None else float(expected[distance])
        summaries.append(
            DistanceSummary(
                distance=int(distance),
                pairs=values.numel(),
                mean=float(values.mean()),
                spread=float(values.max() - values.min()),
                expected=target,
                max_deviation=None if target is None else float((values - target).abs().max()),
            )
        )
    return summaries
