"""xPos (Sun et al., 2022): a per-pair decay on top of RoPE."""

from __future__ import annotations

import torch

from posenc._validation import (
    as_positions,
    check_even_positive_int,
    check_positive_float,
)
from posenc.functional.rope.scalings import _exponents

#: xPos's γ (Sun et al., 2022): ζ_k = (2k/r + γ)/(1 + γ).
XPOS_GAMMA = 0.4


def xpos_zeta(rotary_dim: int, gamma: float = XPOS_GAMMA) -> torch.Tensor:
    """xPos's per-pair decay base ζ_k = (2k/r + γ)/(1 + γ), float64 ``[r/2]``, each in (0, 1) for γ > 0.

    Raises:
        ValueError: γ not positive and finite (ζ_0 = γ/(1 + γ) would be 0 or less).
    """
    gamma = check_positive_float("gamma", gamma)
    return (_exponents(check_even_positive_int("rotary_dim", rotary_dim)) + gamma) / (1 + gamma)


def xpos_scale(
    positions: torch.Tensor | int,
    rotary_dim: int,
    *,
    gamma: float = XPOS_GAMMA,
    scale_base: float = 512.0,
    reference: torch.Tensor | int = 0,
) -> torch.Tensor:
    """xPos decay (Sun et al., 2022, https://arxiv.org/abs/2212.10554): ζ_k^((pos − c)/scale_base), float64 ``[..., r/2]``.

    ζ_k = (2k/r + γ)/(1 + γ). Queries are scaled by it and keys by its inverse, so q·k gains the
    relative factor ζ_k^((m−n)/scale_base), decaying with distance, whatever the reference position c
    (``reference``: an int, or a tensor broadcasting against ``positions``, e.g. ``[b, 1]``). Measured
    from c = 0 the scale leaves float32 near |pos| = 36,000 and float16 near 4,500; a reference near
    the positions keeps it finite at any position.
    """
    check_positive_float("scale_base", scale_base)
    zeta = xpos_zeta(rotary_dim, gamma)  # [r/2]
    positions = as_positions(positions)
    offsets = (positions - torch.as_tensor(reference, device=positions.device)).to(torch.float64)
    return zeta.to(positions.device) ** (offsets.unsqueeze(-1) / scale_base)  # [..., r/2]


__all__ = [
    "XPOS_GAMMA",
    "xpos_scale",
    "xpos_zeta",
]
