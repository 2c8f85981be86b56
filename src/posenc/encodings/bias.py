"""Encodings that bias attention scores: ALiBi, T5's bucketed relative bias, Swin's 2-D window table.

Each gives the same numbers two ways: ``bias(q_positions, k_positions)`` materialises ``[h, i, j]``
(or ``[b, h, i, j]``) for eager/SDPA attention; ``score_mod(...)`` adds it inside
``flex_attention``, one score at a time, with no s×s tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from posenc._validation import (
    as_positions,
    check_bool,
    check_int,
    check_on_device,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding, PositionSpace
from posenc.encodings.description import Description, SeedRow
from posenc.functional.alibi import alibi_bias, alibi_distance_bias, alibi_scores, alibi_slopes
from posenc.functional.relative import swin_relative_index, swin_table_size, t5_relative_bucket
from posenc.functional.resample import resize_relative_table


def _positions(positions: torch.Tensor | None, offset: int) -> Callable:
    """Index -> position inside a score_mod: the given positions ``[s]`` / ``[b, s]``, or index + offset."""
    if positions is None:
        return lambda b, index: index + offset
    positions = as_positions(positions)
    if positions.dim() == 1:
        return lambda b, index: positions[index]
    return lambda b, index: positions[b, index]


class BiasEncoding(PositionalEncoding):
    """Shared plumbing: ``relative_bias(q_pos, k_pos, h)`` scalar form -> both ``bias`` and ``score_mod``."""

    kind = "bias"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)

    def score_mod(
        self,
        q_offset: int = 0,
        kv_offset: int = 0,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> Callable:
        """``score_mod(score, b, h, q_idx, kv_idx)`` for flex_attention adding this bias.

        Query/key positions are ``q_positions[q_idx]`` (or ``[b, q_idx]``) when given, else
        ``q_idx + q_offset`` (a KV-cache offset); the same for keys.
        """
        if q_positions is not None and k_positions is not None:
            q_positions, k_positions = self._checked(q_positions, k_positions)
        elif q_positions is not None or k_positions is not None:
            raise ValueError("score_mod takes q_positions and k_positions together, or neither (offsets)")
        q_offset, kv_offset = self._checked_offsets(q_offset, kv_offset)
        q_position, k_position = _positions(q_positions, q_offset), _positions(k_positions, kv_offset)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + self.pair_bias(q_position(b, q_idx), k_position(b, kv_idx), h).to(score.dtype)

        return score_mod

    def pair_bias(
        self, q_position: torch.Tensor, k_position: torch.Tensor, head: torch.Tensor
    ) -> torch.Tensor:
        """The bias for one (query position, key position, head); tensor ops only (runs under vmap)."""
        raise NotImplementedError

    def _checked_offsets(self, q_offset: object, kv_offset: object) -> tuple[int, int]:
        """The offsets as ints: positions are integers (a fractional offset gave a bias between positions)."""
        return check_int("q_offset", q_offset), check_int("kv_offset", kv_offset)

    def _checked(self, q_positions, k_positions) -> tuple[torch.Tensor, torch.Tensor]:
        """Query and key positions this bias can take (``pair_positions``' checks: shapes, int64 distances)."""
        return pair_positions(q_positions, k_positions)


class ALiBi(BiasEncoding):
    """ALiBi (Press et al., 2022, https://arxiv.org/abs/2108.12409): score − m_h·(i − j), fixed slopes.

    Args:
        n_heads: attention heads; slopes follow the paper's rule for any count (as BLOOM).
        symmetric: −m·|i − j| for bidirectional attention instead of the causal −m·(i − j).
        bias_max: MPT's ``alibi_bias_max`` slope rule instead of the paper's (8 equals it for
            power-of-two head counts).
    """


    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's heads; −m·|i − j| for a bidirectional model."""
        return {"n_heads": n_heads, "symmetric": not causal}

    def __init__(self, n_heads: int, *, symmetric: bool = False, bias_max: float | None = None) -> None:
        super().__init__(n_heads)
        self.symmetric = check_bool("symmetric", symmetric)
        # a symmetric ALiBi biases keys after the query by their own distance
        self.capabilities = replace(type(self).capabilities, two_sided=self.symmetric)
        self.bias_max = None if bias_max is None else check_positive_float("bias_max", bias_max)
        self.register_buffer(
            "slopes", alibi_slopes(self.n_heads, bias_max=self.bias_max), persistent=False
        )  # [h]

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.slopes = alibi_slopes(self.n_heads, bias_max=self.bias_max).to(
            self.slopes.device
        )  # never rounded
        return self

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        return alibi_bias(q_positions, k_positions, self.slopes, symmetric=self.symmetric)

    def distance_bias(self, distances: torch.Tensor) -> torch.Tensor:
        """The bias at query − key distances ``[n]`` for each head, ``[h, n]`` (float64)."""
        return alibi_distance_bias(distances, self.slopes, symmetric=self.symmetric)

    def pair_bias(self, q_position, k_position, head):
        return alibi_scores(k_position - q_position, self.slopes[head], symmetric=self.symmetric)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, symmetric={self.symmetric}, bias_max={self.bias_max}"


#: What posenc says about :class:`ALiBi` (``register`` takes it with the class).
ALIBI_DESCRIPTION = Description(
    label="ALiBi",
    where_it_acts="adds −m_h·(i − j) to attention scores",
    used_by="BLOOM, MPT",
    parameter_formula="0",
    seed_row=SeedRow(5, "ALiBi", "h slopes", "Excellent", "Explicit"),
    fixed_buffers=("slopes",),
    figures={
        "bias-heads": "−m_h·(i − j) on one colour scale: head 0 falls off fastest, the last head barely at all. "
        "Keys after the query (above the diagonal) get a positive bias that the causal mask removes.",
        "bias-distance": "Straight lines through 0 with slope −m_h per head: no learned parameters, and the "
        "same penalty per step of distance at any length.",
    },
)


class T5RelativeBias(BiasEncoding):
    """T5's learned relative bias (Raffel et al., 2020, https://arxiv.org/abs/1910.10683).

    A table ``[num_buckets, n_heads]`` indexed by the bucket of the key − query distance; exact for
    small distances, logarithmic up to ``max_distance``, one shared bucket beyond. T5 computes it in
    the first layer and shares it across layers; build one per layer for per-layer tables.
    The table does not grow with sequence length: B·h parameters.

    Args:
        n_heads: attention heads.
        num_buckets: B (32 in T5).
        max_distance: distance from which every pair shares the last bucket (128 in T5).
        bidirectional: separate buckets for keys before and after the query (encoders); False for decoders.
        init_std: standard deviation of the table's normal initialisation.
    """

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """T5's 32 buckets and max_distance 128 for long inputs; for a model of max_len positions fewer
        buckets (a power of two ≥ 8, at most max_len / 2) and max_distance ≤ max_len / 2, so that the far
        buckets are reached by the positions the model is trained on."""
        buckets = min(32, max(8, 1 << max(1, max_len // 2).bit_length() - 1))
        exact = buckets // 2 if causal else buckets // 4
        return {
            "n_heads": n_heads,
            "bidirectional": not causal,
            "num_buckets": buckets,
            "max_distance": min(128, max(exact + 1, max_len // 2)),
        }

    def __init__(
        self,
        n_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(n_heads)
        self.num_buckets = check_positive_int("num_buckets", num_buckets)
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.bidirectional = check_bool("bidirectional", bidirectional)
        # a bidirectional T5 bias has buckets of its own for keys after the query
        self.capabilities = replace(type(self).capabilities, two_sided=self.bidirectional)
        # Every distance beyond ±max_distance shares its side's last bucket, so a lookup over
        # [−max_distance, max_distance] with clamped distances is exact (and runs under vmap).
        distances = torch.arange(-max_distance, max_distance + 1)
        lookup = t5_relative_bucket(
            distances, bidirectional=self.bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        self.register_buffer("bucket_lookup", lookup, persistent=False)  # [2·max_distance + 1]
        self.table = nn.Parameter(
            torch.randn(num_buckets, self.n_heads) * check_positive_float("init_std", init_std)
        )

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return self.num_buckets * (n_heads or self.n_heads)

    def buckets(self, relative_position: torch.Tensor) -> torch.Tensor:
        clamped = relative_position.clamp(-self.max_distance, self.max_distance)
        return self.bucket_lookup[clamped + self.max_distance]

    def values(self, relative_position: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
        """The bias at key − query positions ``[...]``: of every head ``[..., h]``, or of ``head`` (a tensor
        broadcasting against the positions) ``[...]``. The one lookup that the materialised bias, the
        per-distance table and the flex score_mod all read."""
        buckets = self.buckets(relative_position)
        return self.table[buckets] if head is None else self.table[buckets, head]

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        relative = k_positions.unsqueeze(-2) - q_positions.unsqueeze(-1)  # [(b,) i, j]: key − query
        return self.values(relative).movedim(-1, -3)  # [(b,) h, i, j]

    def distance_bias(self, distances: torch.Tensor) -> torch.Tensor:
        """The bias at query − key distances ``[n]`` for each head, ``[h, n]``."""
        return self.values(-distances).T

    def bucketing(self) -> tuple[int, int]:
        return self.num_buckets, self.max_distance

    def bucket_table(self) -> torch.Tensor:
        return self.table.detach().to(torch.float64)  # [num_buckets, h]

    def pair_bias(self, q_position, k_position, head):
        return self.values(k_position - q_position, head)

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )


#: What posenc says about :class:`T5RelativeBias` (``register`` takes it with the class).
T5_DESCRIPTION = Description(
    label="T5",
    where_it_acts="adds a learned bucketed relative bias to scores",
    used_by="T5",
    parameter_formula="B·h (B = num_buckets, 32 by default; independent of L)",
    seed_row=SeedRow(4, "Relative Bias", "O(L)", "Good", "Explicit"),
    specimen_kwargs={"n_heads": 8},
    figures={
        "buckets": "One bucket per distance up to half the buckets of a side, then logarithmically wider "
        "buckets, and one shared bucket from max_distance on; causal buckets count only keys before the query.",
        "table": "The learned values, here as initialised (random normal, small): training sets them; the "
        "bucket map decides which pairs of positions share one.",
        "bias-heads": "Bands parallel to the diagonal, narrow near it and ever wider away from it: pairs in one "
        "bucket share a bias, so the bias depends only on the (bucketed) distance j − i.",
    },
)


class SwinRelativeBias(BiasEncoding):
    """Swin's 2-D relative position bias (Liu et al., 2021, https://arxiv.org/abs/2103.14030).

    A learned table ``[(2Wh−1)(2Ww−1), n_heads]`` indexed by the (dy, dx) offset of two tokens of a
    Wh×Ww window; positions are the tokens' row-major indices 0 … Wh·Ww − 1 within the window.
    """

    def __init__(self, n_heads: int, *, window: int | tuple[int, int] = 7, init_std: float = 0.02) -> None:
        super().__init__(n_heads)
        self.window = window
        index = swin_relative_index(window)  # [N, N]
        self.register_buffer("relative_index", index, persistent=False)
        self.table = nn.Parameter(
            torch.nn.init.trunc_normal_(
                torch.empty(swin_table_size(window), self.n_heads),
                std=check_positive_float("init_std", init_std),
            )
        )

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return swin_table_size(self.window) * (n_heads or self.n_heads)

    @property
    def window_shape(self) -> tuple[int, int]:
        """(Wh, Ww)."""
        return (self.window, self.window) if isinstance(self.window, int) else tuple(self.window)

    @property
    def position_space(self) -> PositionSpace:
        """Positions are the row-major token indices 0 … Wh·Ww − 1 of a 2-D window: one column, two axes."""
        return PositionSpace(axes=2, limit=self.relative_index.shape[0])

    def _checked_offsets(self, q_offset: object, kv_offset: object) -> tuple[int, int]:
        """Offsets 0 only: a window's tokens are its indices, with no KV cache to continue (an offset read
        rows past the table, or wrapped round to other rows below 0)."""
        q_offset, kv_offset = super()._checked_offsets(q_offset, kv_offset)
        if q_offset or kv_offset:
            raise ValueError(
                f"Swin positions are token indices 0 … {self.position_space.limit - 1} of one window: its score_mod "
                f"takes no offsets, got q_offset={q_offset}, kv_offset={kv_offset} (give q_positions and "
                "k_positions)"
            )
        return q_offset, kv_offset

    def translations(
        self, seq_len: int, shifts: tuple[int, ...] | None = None
    ) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The first half row of the window, and shifts that move it along a row or down whole rows.

        A shift of the flattened index is a translation only when no row wraps.

        Raises:
            ValueError: a shift that would wrap a row or leave the window.
        """
        rows, cols = self.window_shape
        length = cols // 2 + 1

        def inside(shift: int) -> bool:
            return 0 < shift and shift % cols <= cols - length and shift // cols < rows

        if shifts is None:
            candidates = (1, cols - length, cols, (rows - 1) * cols + cols - length)
            shifts = tuple(dict.fromkeys(shift for shift in candidates if inside(shift)))
            if not shifts:
                raise ValueError(f"a {rows}×{cols} Swin window leaves no room to shift a token")
        for shift in shifts:
            if not (shift == 0 or inside(shift)):
                raise ValueError(
                    f"shift {shift} is not a translation of tokens 0 … {length - 1} inside a "
                    f"{rows}×{cols} Swin window (a row would wrap or leave the window)"
                )
        return torch.arange(length), tuple(shifts)

    def offset_table(self) -> torch.Tensor:
        """The table per head on the grid of 2-D offsets, float64 ``[h, 2Wh−1, 2Ww−1]``.

        Entry ``[h, dy + Wh − 1, dx + Ww − 1]``: the bias between a query token and a key token dy rows
        and dx columns before it.
        """
        height, width = self.window_shape
        table = self.table.detach().to(torch.float64)  # [(2Wh−1)(2Ww−1), h]
        return table.T.reshape(self.n_heads, 2 * height - 1, 2 * width - 1)

    def _check(self, positions: torch.Tensor) -> torch.Tensor:
        tokens = self.relative_index.shape[0]
        message = f"Swin positions are token indices 0 … {tokens - 1} of a {self.window} window"
        if torch.compiler.is_compiling():  # reading a value would be a host sync
            check_on_device((positions >= 0) & (positions < tokens), message)
            return positions
        if int(positions.min()) < 0 or int(positions.max()) >= tokens:
            raise ValueError(
                f"{message}, got {int(positions.min()) if int(positions.min()) < 0 else int(positions.max())}"
            )
        return positions

    def _checked(self, q_positions, k_positions) -> tuple[torch.Tensor, torch.Tensor]:
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        return self._check(q_positions), self._check(k_positions)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        q_positions, k_positions = self._checked(q_positions, k_positions)
        index = self.relative_index[q_positions.unsqueeze(-1), k_positions.unsqueeze(-2)]  # [(b,) i, j]
        # gathered head-major, so the bias is contiguous [h, i, j] and its gradient an index_add
        table = self.table.T.contiguous()  # [h, (2Wh−1)(2Ww−1)]
        bias = table.index_select(1, index.flatten()).view(self.n_heads, *index.shape)  # [h, (b,) i, j]
        return bias if index.dim() == 2 else bias.movedim(0, 1)  # [(b,) h, i, j]

    def pair_bias(self, q_position, k_position, head):
        return self.table[self.relative_index[q_position, k_position], head]

    def resized(self, window: int | tuple[int, int], *, mode: str = "bicubic") -> SwinRelativeBias:
        """A new bias for another window, its table this one's interpolated over the 2-D offsets
        (:func:`posenc.functional.resize_relative_table`), as Swin fine-tunes at a larger window."""
        resized = SwinRelativeBias(self.n_heads, window=window)
        with torch.no_grad():
            resized.table.copy_(
                resize_relative_table(self.table.detach(), self.window_shape, window, mode=mode)
            )
        return resized.to(self.table.device)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, window={self.window}"


#: What posenc says about :class:`SwinRelativeBias` (``register`` takes it with the class).
SWIN_DESCRIPTION = Description(
    label="Swin",
    where_it_acts="adds a learned 2-D window bias to scores",
    used_by="Swin Transformer",
    parameter_formula="(2W−1)²·h (W = window, 7 by default; independent of L)",
    figures={
        "table-heads": "One learned value per (dy, dx) offset between two tokens of the window, here as "
        "initialised (truncated normal, small); offset (0, 0) is the centre.",
        "bias-heads": "Repeating blocks: tokens are numbered row by row, and a pair's bias depends only on its "
        "row offset (which block) and column offset (where in the block).",
    },
    lab_not_applicable="Swin's bias is a 2-D window table over the Wh×Ww tokens of an image window (49 positions for 7×7); "
    "it has no meaning for 1-D sequences and no value past the window",
    grid_not_applicable="Swin's table holds the offsets of one Wh×Ww window, and it reads tokens' indices within it; a grid "
    "larger than the window needs windowed attention, and resolution transfer is Swin v2's (swin_v2)",
)
