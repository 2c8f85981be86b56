"""Mochi's rotary embedding: a learned frequency matrix per head over (t, h, w), on frame indices and
patch centres scaled to a fixed area, so a video of any resolution spans the same spatial range."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import check_positive_float, check_positive_int
from posenc.encodings.coordinate_rotation import GRID_FIGURES, CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.rope import apply_rope
from posenc.functional.rotations import directional_angles

#: Mochi 1's base height and width (in latent patches) whose area every resolution is scaled to.
BASE_SIZE = 192


def mochi_positions(
    frames: int, height: int, width: int, *, base_height: int = BASE_SIZE, base_width: int = BASE_SIZE
) -> torch.Tensor:
    """Mochi's (t, h, w) coordinates of a video of ``frames × height × width`` patches, float64
    ``[frames·height·width, 3]`` in raster order: t the frame index, h and w the centres of ``height``
    (``width``) equal cells of [−H·c/2, H·c/2] with c = √(base_height·base_width / (height·width)), so
    every resolution covers the area of the base one, centred on 0.

    Raises:
        ValueError: a size that is not a positive int.
    """
    sizes = [
        check_positive_int(name, value)
        for name, value in (("frames", frames), ("height", height), ("width", width))
    ]
    base = check_positive_int("base_height", base_height) * check_positive_int("base_width", base_width)
    scale = math.sqrt(base / (sizes[1] * sizes[2]))
    t = torch.arange(sizes[0], dtype=torch.float64)
    h, w = ((torch.arange(n, dtype=torch.float64) + 0.5 - n / 2) * scale for n in sizes[1:])  # cell centres
    grid = torch.meshgrid(t, h, w, indexing="ij")
    return torch.stack(grid, dim=-1).reshape(-1, 3)


class MochiRoPE(CoordinateRotation):
    """Mochi 1's rotary embedding (Genmo, 2024, https://github.com/genmoai/mochi; diffusers'
    ``MochiRoPE``): pair k of head h turns by Σ_a x_a·F[a, h, k] at coordinates x = (t, h, w), with the
    frequency matrix F ``[3, n_heads, d/2]`` learned per layer; pairs are interleaved channels (2k, 2k + 1).

    The coordinates are what :func:`mochi_positions` gives (frame index, area-normalised centred patch
    centres): they depend on the whole video's size, so a caller makes them once per video and passes
    them as positions. F starts at RoPE's magnitudes base^(−2k/d) along random unit directions of
    (t, h, w) per head and pair (posenc's choice: Mochi's own weights are loaded, not initialised).

    Args:
        d_head: head width (even).
        n_heads: heads (one frequency matrix row per head).
        base: the base of the initial magnitudes.
    """

    per_head = True

    def __init__(self, d_head: int, n_heads: int, *, base: float = 10000.0) -> None:
        super().__init__(d_head, axes=3, n_heads=n_heads)
        if self.d_head % 2:
            raise ValueError(
                f"Mochi's rotary embedding turns pairs of channels: d_head must be even, got {d_head}"
            )
        self.base = check_positive_float("base", base)
        pairs = self.d_head // 2
        magnitude = self.base ** (-2 * torch.arange(pairs, dtype=torch.float64) / self.d_head)  # [d/2]
        direction = torch.randn(3, self.n_heads, pairs, dtype=torch.float64)
        direction = direction / direction.norm(dim=0, keepdim=True)
        self.pos_frequencies = nn.Parameter(
            (direction * magnitude).to(torch.get_default_dtype())
        )  # [3, h, d/2], diffusers' name

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin ``[b or 1, h, s, d/2]`` at coordinates ``[s, 3]`` or ``[b, s, 3]``."""
        angle = directional_angles(positions, self.pos_frequencies.permute(1, 2, 0))  # F as [h, d/2, 3]
        return torch.cos(angle), torch.sin(angle)

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        cos, sin = self.cos_sin(positions)
        return apply_rope(x, cos, sin, layout="interleaved")

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, n_heads={self.n_heads}, base={self.base}"


#: What posenc says about :class:`MochiRoPE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Mochi RoPE",
    where_it_acts="rotates q and k by a learned per-head frequency matrix over (t, h, w)",
    used_by="Mochi 1 (Genmo)",
    parameter_formula="3·h·d/2 with d = d_head (per layer)",
    specimen_kwargs={"d_head": 64, "n_heads": 8},
    figures=GRID_FIGURES,
    lab_not_applicable="its positions are (t, h, w) coordinates of video patches; the lab's tasks are 1-D sequences",
)
