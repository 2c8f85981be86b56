"""Float error of cos/sin tables against an exact reference, for any recipe, across positions."""

from __future__ import annotations

from collections.abc import Callable

import torch

from posenc._validation import as_positions, check_choice
from posenc.functional.angles import exact_cos_sin, split_frequencies
from posenc.functional.rope import rope_cos_sin

CosSinRecipe = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def float32_recipe(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The usual recipe: float32 inv_freq times float32 positions, cos/sin in float32."""
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(torch.float32)  # [..., r/2]
    return angles.cos(), angles.sin()


def posenc_recipe(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """posenc's exact angles, float32 output."""
    return rope_cos_sin(positions, inv_freq, dtype=torch.float32)


RECIPES: dict[str, CosSinRecipe] = {"posenc": posenc_recipe, "float32": float32_recipe}


def angle_error(recipe: CosSinRecipe | str, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """max over frequencies of |cos − exact| and |sin − exact| at each position, float64 ``[n]``.

    The reference is posenc's exact range reduction in float64 (within ~1e-15 of 40-digit values,
    see tests), with ``inv_freq`` taken as exact in float64.

    Raises:
        ValueError: a ``recipe`` name that is not one of ``RECIPES``.
    """
    recipe = RECIPES[check_choice("recipe", recipe, RECIPES)] if isinstance(recipe, str) else recipe
    positions = as_positions(positions)
    inv_freq = inv_freq.to(torch.float64)
    cos_ref, sin_ref = exact_cos_sin(positions, split_frequencies(inv_freq))  # [n, r/2] float64
    cos, sin = recipe(positions, inv_freq)
    cos_error = (cos.to(torch.float64) - cos_ref).abs().amax(dim=-1)
    sin_error = (sin.to(torch.float64) - sin_ref).abs().amax(dim=-1)
    return torch.maximum(cos_error, sin_error)
