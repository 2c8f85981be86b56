"""Swin v2's continuous position bias: a small MLP of log-spaced 2-D offsets, so windows can grow."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import as_coordinates, check_positive_int
from posenc.encodings.base import PositionalEncoding, PositionSpace
from posenc.encodings.description import Description

#: Integer coordinates whose box of offsets holds more than this many entries per pair (sparse
#: coordinates far apart) take the offsets pair by pair; up to it, a table of the offsets that occur.
SPARSE_BOX = 16
#: Swin v2 maps the offsets of its (pretraining) window to ±8 before taking logarithms.
OFFSET_SCALE = 8.0


def log_spaced_offsets(offsets: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Swin v2's coordinates of 2-D offsets ``[..., 2]`` (dy, dx): each axis scaled so that the window's
    largest offset W − 1 becomes 8, then sign(x)·log2(1 + |x|)/log2(8), so ±8 maps to ±log2(9)/3 ≈ ±1.057."""
    scaled = (
        offsets
        / torch.tensor([w - 1 for w in window], dtype=offsets.dtype, device=offsets.device)
        * OFFSET_SCALE
    )
    return torch.sign(scaled) * torch.log2(scaled.abs() + 1.0) / math.log2(OFFSET_SCALE)


def offset_index(
    q_positions: torch.Tensor, k_positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Every 2-D offset query − key of coordinates ``[(b,) i, 2]`` and ``[(b,) j, 2]`` as an entry of one
    table: ``(offsets [n, 2], index [(b,) i, j])`` with ``offsets[index[…, p, q]]`` the offset of query p
    and key q.

    Integer coordinates, by arithmetic: each axis a spans lo_a = min q_a − max k_a … hi_a = max q_a −
    min k_a (n_a values); the table holds that box of offsets row-major, so offset (dy, dx) sits at
    (dy − lo_y)·n_x + (dx − lo_x): ``(q_y·n_x + q_x) − (k_y·n_x + k_x)`` less that of (lo_y, lo_x), a
    difference of one number per query and one per key. For the tokens of a W×W window that is
    (dy + W − 1)·(2W − 1) + (dx + W − 1) over (2W − 1)² offsets. Fractional coordinates: the distinct
    offsets of each axis (a sort of one column, not of every pair's two) and their product. Where the box
    holds more entries than there are pairs (tokens along a line: (2s − 1)² entries for s² pairs), only
    the entries that occur, marked and numbered (:func:`_occurring`). None where the table would hold more
    entries than there are pairs and integer boxes more than :data:`SPARSE_BOX` per pair (sparse
    coordinates far apart): the offsets are then taken pair by pair.
    """
    batch = max([1, *(p.shape[0] for p in (q_positions, k_positions) if p.dim() == 3)])
    pairs = batch * q_positions.shape[-2] * k_positions.shape[-2]
    integral = not (q_positions.is_floating_point() or k_positions.is_floating_point()) or (
        torch.equal(q_positions, q_positions.round()) and torch.equal(k_positions, k_positions.round())
    )
    if not integral:
        axes, places = [], []
        for a in (0, 1):
            along = q_positions[..., :, None, a] - k_positions[..., None, :, a]  # [(b,) i, j]
            values, place = torch.unique(along, return_inverse=True)  # sorted distinct offsets of axis a
            axes.append(values)
            places.append(place)
        if axes[0].numel() * axes[1].numel() > pairs:
            return None
        index = places[0] * axes[1].numel() + places[1]  # [(b,) i, j]
    else:
        q_flat, k_flat = q_positions.reshape(-1, 2), k_positions.reshape(-1, 2)
        low = q_flat.amin(dim=0) - k_flat.amax(dim=0)  # [2]: (lo_y, lo_x)
        high = q_flat.amax(dim=0) - k_flat.amin(dim=0)
        sizes = [int(n) for n in (high - low + 1).tolist()]  # (n_y, n_x)
        box = sizes[0] * sizes[1]
        if box > SPARSE_BOX * pairs:
            return None
        q_line = (q_positions[..., 0] * sizes[1] + q_positions[..., 1]).to(torch.int64)  # [(b,) i]
        k_line = (k_positions[..., 0] * sizes[1] + k_positions[..., 1]).to(torch.int64)  # [(b,) j]
        first = int(low[0]) * sizes[1] + int(low[1])
        index = q_line.unsqueeze(-1) - k_line.unsqueeze(-2) - first  # [(b,) i, j]: the entry of the box
        if box > pairs:  # fewer pairs than box entries (tokens along a line): the entries that occur
            return _occurring(index, box, sizes[1], low)
        axes = [torch.arange(n, dtype=low.dtype, device=low.device) + low[a] for a, n in enumerate(sizes)]
    offsets = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 2)  # [n_y·n_x, 2]
    return offsets, index


def _occurring(
    index: torch.Tensor, box: int, n_x: int, low: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(offsets [n, 2], index [(b,) i, j])`` for the n entries of the box (row-major, ``n_x`` columns,
    first offset ``low``) that ``index`` names: each marked in a ``[box]`` bool, numbered in order, and
    the index renumbered; the MLP then runs once per offset that occurs (2s − 1 for s tokens along a line,
    where the box holds (2s − 1)²)."""
    present = torch.zeros(box, dtype=torch.bool, device=index.device)
    present[index.flatten()] = True
    kept = present.nonzero().squeeze(1)  # [n]: the entries that occur, in order
    number = torch.empty(box, dtype=torch.int32, device=index.device)
    number[kept] = torch.arange(kept.numel(), dtype=torch.int32, device=index.device)
    offsets = torch.stack((kept.div(n_x, rounding_mode="floor"), kept.remainder(n_x)), dim=-1) + low  # [n, 2]
    return offsets, number[index].to(torch.int64)


class ContinuousPositionBias(PositionalEncoding):
    """Swin v2's log-spaced continuous position bias (Liu et al., 2022, https://arxiv.org/abs/2111.09883, §3.2).

    The bias between a query and a key token at 2-D coordinates is 16·sigmoid(MLP(Δ̂)) per head, where
    Δ = query − key (rows, columns) and Δ̂ its log-spaced form (:func:`log_spaced_offsets`); the MLP is
    Linear(2, hidden) + ReLU + Linear(hidden, heads, no bias). Because the MLP takes continuous offsets,
    the same weights give a bias for any window, and the log spacing keeps a larger window's offsets
    close to the trained ones (the paper's transfer from 8×8 to 24×24 windows).

    Positions are the tokens' 2-D coordinates ``[s, 2]`` or ``[b, s, 2]`` (row, column; integer or float),
    e.g. :func:`posenc.functional.grid_positions` of the window. timm's ``RelPosMlp(mode="swin")`` is this
    module with ``hidden=128``.

    Args:
        n_heads: attention heads.
        window: the window (Wh, Ww), or its side, whose largest offsets map to ±8: Swin v2's
            ``pretrained_window_size`` where one is given, else its window; each side ≥ 2.
        hidden: the MLP's hidden width (512 in Swin v2).
    """

    kind = "bias"

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The heads, and as the window whose offsets map to ±8 the square grid of max_len patches the
        model is trained on (side ⌊√max_len⌋, at least 2): Swin v2's pretrained window."""
        return {"n_heads": n_heads, "window": max(2, math.isqrt(check_positive_int("max_len", max_len)))}

    def __init__(self, n_heads: int, *, window: int | tuple[int, int] = 8, hidden: int = 512) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)
        sides = (
            (window, window) if isinstance(window, int) and not isinstance(window, bool) else tuple(window)
        )
        if len(sides) != 2:
            raise ValueError(f"window must be a side or (height, width), got {window!r}")
        self.window = tuple(check_positive_int("window", side) for side in sides)
        if min(self.window) < 2:
            raise ValueError(
                f"Swin v2 scales offsets by the window's largest one, W − 1: each side must be ≥ 2, got {self.window}"
            )
        self.hidden = check_positive_int("hidden", hidden)
        self.mlp = nn.Sequential(
            nn.Linear(2, self.hidden), nn.ReLU(), nn.Linear(self.hidden, self.n_heads, bias=False)
        )

    @property
    def position_space(self) -> PositionSpace:
        """(row, column) coordinates ``[s, 2]`` of the patches."""
        return PositionSpace(columns=2, axes=2)

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return 3 * self.hidden + self.hidden * (n_heads or self.n_heads)

    def _checked(self, q_positions, k_positions) -> tuple[torch.Tensor, torch.Tensor]:
        q_positions, k_positions = (
            as_coordinates(q_positions, 2, name="q_positions"),
            as_coordinates(k_positions, 2, name="k_positions"),
        )
        if q_positions.dim() == 3 and k_positions.dim() == 3 and q_positions.shape[0] != k_positions.shape[0]:
            raise ValueError(
                f"q_positions and k_positions must have the same batch size, got {q_positions.shape[0]} and "
                f"{k_positions.shape[0]}"
            )
        return q_positions, k_positions

    def offset_bias(self, offsets: torch.Tensor) -> torch.Tensor:
        """The bias of every head at 2-D offsets ``[..., 2]`` (query − key): ``[..., h]``."""
        coordinates = log_spaced_offsets(offsets.to(self.mlp[0].weight.dtype), self.window)
        return 16 * torch.sigmoid(self.mlp(coordinates))

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """``[h, i, j]`` (or ``[b, h, i, j]``) for coordinates ``[i, 2]`` and ``[j, 2]`` (or batched).

        The MLP runs once per offset of the box the offsets lie in, found by arithmetic for integer
        coordinates: a window of W×W tokens has (2W−1)² of them, not n² pairs (:func:`offset_index`);
        flex reads this bias through the score_mod the base class derives from it."""
        q_positions, k_positions = self._checked(q_positions, k_positions)
        located = None if torch.compiler.is_compiling() else offset_index(q_positions, k_positions)
        if located is None:  # a data-dependent table (compiling), or sparse coordinates far apart
            offsets = q_positions.unsqueeze(-2) - k_positions.unsqueeze(-3)  # [(b,) i, j, 2]: query − key
            return self.offset_bias(offsets).movedim(-1, -3)  # [(b,) h, i, j]
        offsets, index = located  # [n, 2], [(b,) i, j]
        table = self.offset_bias(offsets).T.contiguous()  # [h, n]: the bias of each head at each offset
        bias = table.index_select(1, index.flatten()).view(self.n_heads, *index.shape)  # [h, (b,) i, j]
        return bias if index.dim() == 2 else bias.movedim(0, 1)  # [(b,) h, i, j]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, window={self.window}, hidden={self.hidden}"


#: What posenc says about :class:`ContinuousPositionBias` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Swin v2",
    where_it_acts="adds 16·sigmoid(MLP(log-spaced 2-D offset)) to scores",
    used_by="Swin v2, timm's RelPosMlp",
    parameter_formula="3·H + H·h (H = hidden, 512 by default; independent of L)",
    specimen_kwargs={"n_heads": 8, "window": 8},
    figures={
        "grid-bias-heads": "The bias of the centre token of the window to every token, per head: a smooth "
        "function of the 2-D offset (16·sigmoid of an MLP, here untrained), defined for any offset.",
    },
    lab_not_applicable="Swin v2's bias takes 2-D offsets between image tokens; the lab's 1-D tasks give one coordinate",
)


__all__ = ["ContinuousPositionBias", "log_spaced_offsets", "offset_index"]
