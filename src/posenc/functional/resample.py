"""Learned position tables moved to a new grid: a ViT's absolute table, a Swin window's relative table.

Fine-tuning a ViT at another resolution interpolates its learned table of patch positions on their
grid (Dosovitskiy et al., 2021, §3.2), leaving prefix tokens (CLS, registers) as they are: what timm's
``resample_abs_pos_embed`` does. Swin (Liu et al., 2021) fine-tuned at a larger window interpolates its
table of relative offsets, ``(2Wh − 1) × (2Ww − 1)`` per head, bicubically.

Notation used for tensor shapes: N table rows (prefix tokens first), d width, h heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from posenc._validation import check_bool, check_choice, check_float_tensor, check_int, check_positive_ints

#: Interpolation modes by the number of grid axes (what ``F.interpolate`` offers for that many).
MODES = {
    1: ("linear", "nearest", "area"),
    2: ("bicubic", "bilinear", "nearest", "area"),
    3: ("trilinear", "nearest", "area"),
}
#: Modes that take ``antialias`` (torch's own restriction).
ANTIALIASED = ("bilinear", "bicubic")


def _is_side(size: int | Sequence[int]) -> bool:
    return isinstance(size, int) and not isinstance(size, bool)


def _grid(name: str, size: int | Sequence[int], axes: int = 2) -> tuple[int, ...]:
    """``size`` as one side per axis: an int is the side of a square grid (``axes`` equal sides)."""
    sizes = (size,) * axes if _is_side(size) else tuple(size)
    return check_positive_ints(name, sizes)


def _grids(
    old_size: int | Sequence[int], new_size: int | Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Both grids, a side taking the other grid's axes (2 when both are sides)."""
    old = _grid("old_size", old_size, 2 if _is_side(new_size) else len(_grid("new_size", new_size)))
    return old, _grid("new_size", new_size, len(old))


def resample_table(
    table: torch.Tensor,
    old_size: int | Sequence[int],
    new_size: int | Sequence[int],
    *,
    prefix_tokens: int = 0,
    mode: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """A learned table of grid positions interpolated from an ``old_size`` grid to a ``new_size`` one.

    The rows after ``prefix_tokens`` are the grid's positions in row-major order (the last axis fastest),
    as ViTs flatten their patches; they are interpolated as an image of ``d`` channels, the prefix rows
    kept. Computed in float32 (float64 stays float64) and returned in the table's dtype, as timm's
    ``resample_abs_pos_embed`` does (``mode="bicubic"``, ``antialias=True``, ``prefix_tokens=1`` for a
    CLS token).

    Args:
        table: ``[N, d]`` or ViT's ``[1, N, d]``, N = prefix_tokens + Π old_size.
        old_size, new_size: the grids, (h, w) or (t, h, w) (same axes for both); an int is the side of
            a grid of equal sides with the other grid's axes, a square when both are ints.
        prefix_tokens: rows before the grid (CLS, registers), copied unchanged.
        mode: ``F.interpolate``'s mode for the grid's number of axes (bicubic or bilinear for 2 axes).
        antialias: low-pass when shrinking (bilinear and bicubic only).

    Returns:
        ``[N', d]`` or ``[1, N', d]``, N' = prefix_tokens + Π new_size, in the table's dtype.

    Raises:
        ValueError: a table whose row count is not prefix_tokens + Π old_size, more prefix tokens than
            rows, grids of different axes, a side < 1, a mode the grid's axes do not offer, antialias
            with a mode that does not take it.
        TypeError: a non-float table.
    """
    check_float_tensor("table", table)
    batched = table.dim() == 3
    if table.dim() not in (2, 3) or (batched and table.shape[0] != 1):
        raise ValueError(f"table must be [N, d] or [1, N, d], got shape {tuple(table.shape)}")
    rows = table.shape[-2]
    prefix_tokens = check_int("prefix_tokens", prefix_tokens)
    if not 0 <= prefix_tokens <= rows:
        raise ValueError(f"prefix_tokens must lie in 0 … {rows} (the table's rows), got {prefix_tokens}")
    old, new = _grids(old_size, new_size)
    if len(new) != len(old):
        raise ValueError(f"old_size {old} and new_size {new} must have the same number of axes")
    if rows - prefix_tokens != math.prod(old):
        raise ValueError(
            f"the table holds {rows - prefix_tokens} grid rows after {prefix_tokens} prefix tokens, but a grid "
            f"of {old} has {math.prod(old)}"
        )
    mode = check_choice("mode", mode, MODES.get(len(old), ()))
    if check_bool("antialias", antialias) and mode not in ANTIALIASED:
        raise ValueError(
            f"antialias=True needs mode bilinear or bicubic, got mode={mode!r}; pass antialias=False"
        )
    flat = table.reshape(rows, -1)  # [N, d]
    prefix, grid = flat[:prefix_tokens], flat[prefix_tokens:]
    work = torch.promote_types(table.dtype, torch.float32)
    image = grid.to(work).T.reshape(1, -1, *old)  # [1, d, *old]
    resized = F.interpolate(image, size=new, mode=mode, antialias=antialias and mode in ANTIALIASED)
    resized = resized.reshape(flat.shape[-1], -1).T.to(table.dtype)  # [Π new, d]
    out = torch.cat((prefix, resized))
    return out[None] if batched else out


def resize_relative_table(
    table: torch.Tensor,
    old_window: int | Sequence[int],
    new_window: int | Sequence[int],
    *,
    mode: str = "bicubic",
) -> torch.Tensor:
    """A Swin relative-position table ``[(2Wh−1)(2Ww−1), h]`` resized to a new window.

    The table is the per-head image of the (dy, dx) offsets of a window; it is interpolated to the
    offsets of the new window, ``F.interpolate(..., mode="bicubic")`` with corners not aligned, as the
    Swin authors' checkpoint loader does for a larger fine-tuning window. Computed in float32 or better,
    returned in the table's dtype.

    Raises:
        ValueError: a table of another row count than the old window gives, a window side < 1, a mode
            that does not apply to 2-D offsets.
        TypeError: a non-float table.
    """
    check_float_tensor("table", table)
    old, new = _grid("old_window", old_window, 2), _grid("new_window", new_window, 2)
    if len(old) != 2 or len(new) != 2:
        raise ValueError(f"windows are (height, width), got {old} and {new}")
    offsets = (2 * old[0] - 1, 2 * old[1] - 1)
    if table.dim() != 2 or table.shape[0] != offsets[0] * offsets[1]:
        raise ValueError(
            f"a {old[0]}×{old[1]} window's table has {offsets[0] * offsets[1]} rows [(2Wh−1)(2Ww−1), h], "
            f"got shape {tuple(table.shape)}"
        )
    mode = check_choice("mode", mode, MODES[2])
    work = torch.promote_types(table.dtype, torch.float32)
    image = table.to(work).T.reshape(1, table.shape[1], *offsets)  # [1, h, 2Wh−1, 2Ww−1]
    size = (2 * new[0] - 1, 2 * new[1] - 1)
    resized = F.interpolate(
        image, size=size, mode=mode, align_corners=False if mode in ("bicubic", "bilinear") else None
    )
    return resized.reshape(table.shape[1], -1).T.to(table.dtype)  # [(2Wh'−1)(2Ww'−1), h]
