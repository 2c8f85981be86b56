"""ComRoPE: trainable commuting angle matrices, so a learned rotation of n-D coordinates stays exactly
relative; the linearly dependent variant (ComRoPE-LD), each block's generators multiples of one matrix."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import check_positive_float, check_positive_int
from posenc.encodings.coordinate_rotation import GRID_FIGURES, GRID_ONLY, CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.rotations import block_rotate, coordinate_exponential, skew_symmetric


class ComRoPE(CoordinateRotation):
    """ComRoPE-LD (Yu et al., 2025, https://arxiv.org/abs/2506.03737, the linearly dependent variant): the
    angle matrix of axis a in block c is θ_{a,c}·B_c, a learned skew-symmetric B_c ``[B, B]`` per block
    times a learned scale per axis and block, so the axes' matrices commute for any parameters and
    R(x) = exp(Σ_a x_a·θ_{a,c}·B_c) gives R(x)ᵀ·R(y) = R(y − x): q·k depends on the offset alone.

    Of the paper's two variants this is LD; AP (axial partition: each axis its own sub-block) commutes
    by keeping the axes apart, LD by sharing one matrix, which lets every axis turn every channel.

    Args:
        d_head: head width, a multiple of ``block``.
        axes: coordinate axes n.
        block: channels per dense block B.
        scale: standard deviation of B_c's free entries at initialisation, over √B; the θ start at 1
            plus noise of the same size (posenc's choice).

    One set per layer, shared by the heads (grouped keys too). Float64 inside, cast once.
    """

    def __init__(self, d_head: int, *, axes: int = 2, block: int = 8, scale: float = 0.3) -> None:
        super().__init__(d_head, axes=axes)
        self.block = check_positive_int("block", block)
        if self.block < 2 or self.d_head % self.block:
            raise ValueError(f"block must be at least 2 and divide d_head={self.d_head}, got {block}")
        self.scale = check_positive_float("scale", scale)
        blocks, free = self.d_head // self.block, self.block * (self.block - 1) // 2
        spread = self.scale / math.sqrt(self.block)
        self.base_entries = nn.Parameter(torch.randn(blocks, free) * spread)  # [blocks, B·(B − 1)/2]
        self.axis_scales = nn.Parameter(1.0 + torch.randn(self.axes, blocks) * spread)  # [n, blocks]

    def generators(self) -> torch.Tensor:
        """The commuting angle matrices θ_{a,c}·B_c, float64 ``[n, blocks, B, B]``."""
        bases = skew_symmetric(self.base_entries.to(torch.float64), self.block)  # [blocks, B, B]
        return self.axis_scales.to(torch.float64)[:, :, None, None] * bases[None]

    def rotation(self, positions: torch.Tensor) -> torch.Tensor:
        """R(x) per token and block, float64 ``[b or 1, 1, s, blocks, B, B]``, at ``[s, n]`` / ``[b, s, n]``."""
        return coordinate_exponential(positions, self.generators())

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        return block_rotate(x, self.rotation(positions))

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, axes={self.axes}, block={self.block}, scale={self.scale}"


#: What posenc says about :class:`ComRoPE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="ComRoPE-LD",
    where_it_acts="rotates q and k by exp(Σ_a x_a·θ_a·B), commuting learned angle matrices in dense blocks",
    used_by="ComRoPE (vision transformers)",
    parameter_formula="(d/B)·(B·(B − 1)/2 + n) with d = d_head, B = block (8 by default), n axes",
    specimen_kwargs={"d_head": 32, "axes": 2},
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)
