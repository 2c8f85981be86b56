"""LieRE: queries and keys turned by exp(Σ_a x_a·A_a), learned skew-symmetric generators per axis in dense
blocks, so the rotation of n-D coordinates is learned whole rather than pair by pair."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import check_positive_float, check_positive_int
from posenc.encodings.coordinate_rotation import GRID_FIGURES, GRID_ONLY, CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.rotations import block_rotate, coordinate_exponential, skew_symmetric


class LieRE(CoordinateRotation):
    """LieRE (Ostmeier et al., 2024, https://arxiv.org/abs/2406.10322): the rotation of coordinates x is
    R(x) = exp(Σ_a x_a·A_a) with learned skew-symmetric generators A_a, block-diagonal with dense blocks
    of ``block`` channels; queries and keys turn by R of their own coordinates.

    R(x) is orthogonal for any generators. On one axis R(x)ᵀ·R(y) = R(y − x), so q·k depends on the
    distance alone; on several axes the generators need not commute and q·k then depends on where an
    offset starts, not on the offset alone (ComRoPE, ``comrope``, restores that).

    Args:
        d_head: head width, a multiple of ``block``.
        axes: coordinate axes n.
        block: channels per dense block B (2: RoPE-like pairs with learned frequencies; d_head: one
            dense generator, as the paper's full LieRE).
        scale: standard deviation of the generators' free entries at initialisation, over √B (posenc's
            choice: rotations of a few radians across a 14-patch grid).

    One set of generators per layer, shared by the heads (grouped keys too). Float64 inside (the matrix
    exponential of every token's generator), cast once; ``[s, blocks, B, B]`` per call.
    """

    def __init__(self, d_head: int, *, axes: int = 2, block: int = 8, scale: float = 0.3) -> None:
        super().__init__(d_head, axes=axes)
        self.block = check_positive_int("block", block)
        if self.block < 2 or self.d_head % self.block:
            raise ValueError(f"block must be at least 2 and divide d_head={self.d_head}, got {block}")
        self.scale = check_positive_float("scale", scale)
        blocks, free = self.d_head // self.block, self.block * (self.block - 1) // 2
        initial = torch.randn(self.axes, blocks, free) * (self.scale / math.sqrt(self.block))
        self.generator_entries = nn.Parameter(initial)  # [n, blocks, B·(B − 1)/2]

    def generators(self) -> torch.Tensor:
        """The skew-symmetric generators A_a, float64 ``[n, blocks, B, B]``."""
        return skew_symmetric(self.generator_entries.to(torch.float64), self.block)

    def rotation(self, positions: torch.Tensor) -> torch.Tensor:
        """R(x) per token and block, float64 ``[b or 1, 1, s, blocks, B, B]``, at ``[s, n]`` / ``[b, s, n]``."""
        return coordinate_exponential(positions, self.generators())

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        return block_rotate(x, self.rotation(positions))

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, axes={self.axes}, block={self.block}, scale={self.scale}"


#: What posenc says about :class:`LieRE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="LieRE",
    where_it_acts="rotates q and k by exp(Σ_a x_a·A_a), learned skew-symmetric generators in dense blocks",
    used_by="LieRE (vision transformers on 2-D and 3-D inputs)",
    parameter_formula="n·(d/B)·B·(B − 1)/2 with d = d_head, B = block (8 by default), n axes",
    specimen_kwargs={"d_head": 32, "axes": 2},
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)
