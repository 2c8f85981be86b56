"""Encodings on a grid of patches, as numbers: how one patch relates to every other, M-RoPE's positions.

The picture ViT papers show (Dosovitskiy et al., 2021, fig. 7; Heo et al., 2024): the similarity of one
patch's position to every patch of the grid. It is measured through the encoding's own hooks, so any
encoding that takes coordinates gives one: the cosine similarity of codes (additive), the attention
logit of equal unit queries and keys after rotation (rotary), the bias itself (bias).

Notation used for tensor shapes: h×w the grid, heads attention heads.
"""

from __future__ import annotations

import torch

from posenc.analysis.shift import probe_widths
from posenc.encodings import PositionalEncoding, describe
from posenc.encodings.views import view
from posenc.functional.coordinates import grid_positions, mrope_positions

#: The example of :func:`mrope_example`: text, an image of 4×6 merged patches, text, a 2-frame video of
#: 2×2, text (token types as transformers' ``mm_token_type_ids``).
MROPE_EXAMPLE_TYPES = [0] * 3 + [1] * 24 + [0] * 4 + [2] * 8 + [0] * 3
MROPE_EXAMPLE_GRIDS = {"image": [(1, 8, 12)], "video": [(2, 4, 4)]}


def _grid_positions(encoding: PositionalEncoding, grid: tuple[int, int]) -> torch.Tensor:
    """Coordinates of an h×w grid as the encoding takes them, ``[h·w, n]``: rows and columns on two axes;
    on n > 2 axes the grid in the last two (the first ones one frame); integer patch indices unless the
    encoding declares others (its description's ``grid_coordinates``: DINOv3's normalised cell centres)."""
    n = encoding.position_space.columns
    if n < 2:
        raise ValueError(f"{type(encoding).__name__} takes positions on one axis; a grid needs two or more")
    declared = describe(encoding).grid_coordinates
    if declared is not None:
        return declared.grid((1,) * (n - 2) + tuple(grid))  # [h·w, n] float64
    positions = grid_positions(grid)  # [h·w, 2]
    return torch.cat((torch.zeros(positions.shape[0], n - 2, dtype=torch.int64), positions), dim=1)


def patch_similarity(
    encoding: PositionalEncoding, grid: tuple[int, int] = (14, 14), patch: tuple[int, int] | None = None
) -> torch.Tensor:
    """How the position of one patch (default: the centre) relates to every patch of the grid, ``[h, w]``.

    Additive encodings: cosine similarity of the codes. Rotary: q·k / q·q after rotating equal queries
    and keys whose every pair is a unit vector (1 at the patch itself, Σ_k cos(Δθ_k)/(r/2) elsewhere),
    averaged over heads. Bias: the bias from the patch to every key, averaged over heads.

    Raises:
        ValueError: an encoding on one axis, or one with none of these views.
    """
    h, w = grid
    row, col = (h // 2, w // 2) if patch is None else patch
    positions = _grid_positions(encoding, grid)
    index = row * w + col
    with torch.no_grad():
        if "codes" in encoding.views:
            codes = view(encoding, "codes", positions).to(torch.float64)
            similarity = torch.nn.functional.cosine_similarity(codes[index : index + 1], codes, dim=-1)
            return similarity.reshape(h, w)
        if encoding.kind == "rotary":
            return _rotated_similarity(encoding, positions, index).reshape(h, w)
        if "bias" in encoding.views:
            bias = encoding.bias(positions[index : index + 1], positions)
            return bias.to(torch.float64)[..., 0, :].reshape(-1, h * w).mean(0).reshape(h, w)
    raise ValueError(f"{type(encoding).__name__} gives no codes, rotation or bias to compare patches with")


def _rotated_similarity(encoding: PositionalEncoding, positions: torch.Tensor, index: int) -> torch.Tensor:
    widths = probe_widths(encoding)
    ones = torch.ones(1, widths["n_heads"], positions.shape[0], widths["d_head"], dtype=torch.float64)
    q, k = encoding.rotate(ones, ones, positions, positions)  # [1, heads, s, d] each
    query = q[:, :, index : index + 1]  # [1, heads, 1, d]
    logits = (query * k).sum(-1) / (query * query).sum(-1)  # [1, heads, s]
    return logits.mean(dim=(0, 1))


def grid_bias(
    encoding: PositionalEncoding, grid: tuple[int, int] = (8, 8), patch: tuple[int, int] | None = None
) -> torch.Tensor:
    """The bias of every head from one patch (default: the centre) to every patch, ``[heads, h, w]``.

    Raises:
        ValueError: an encoding on one axis or without a bias.
    """
    h, w = grid
    row, col = (h // 2, w // 2) if patch is None else patch
    positions = _grid_positions(encoding, grid)
    index = row * w + col
    if "bias" not in encoding.views:
        raise ValueError(f"{type(encoding).__name__} gives no bias")
    with torch.no_grad():
        bias = encoding.bias(positions[index : index + 1], positions)
    return bias.to(torch.float64)[:, 0, :].reshape(-1, h, w)


def mrope_example(spatial_merge_size: int = 2) -> tuple[torch.Tensor, list[int]]:
    """M-RoPE's (t, h, w) positions ``[s, 3]`` of :data:`MROPE_EXAMPLE_TYPES`, and the token types."""
    types = torch.tensor([MROPE_EXAMPLE_TYPES])
    positions, _ = mrope_positions(
        types,
        MROPE_EXAMPLE_GRIDS["image"],
        MROPE_EXAMPLE_GRIDS["video"],
        spatial_merge_size=spatial_merge_size,
    )
    return positions[0], list(MROPE_EXAMPLE_TYPES)
