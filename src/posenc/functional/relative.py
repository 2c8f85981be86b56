"""Relative-position indices into learned bias tables: T5's distance buckets and Swin's 2-D window offsets.

T5 (Raffel et al., 2020, https://arxiv.org/abs/1910.10683) shares one learned bias per bucket of the
relative position key − query: small distances get a bucket each, larger ones logarithmically wider
buckets up to ``max_distance``, and everything farther the last bucket.

Swin (Liu et al., 2021, https://arxiv.org/abs/2103.14030) learns one bias per 2-D offset between two
tokens of a Wh×Ww window: (2Wh−1)(2Ww−1) rows, indexed for each pair of tokens in the window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from posenc._validation import as_positions, check_positive_int


def _relative_positions(relative_position: int | torch.Tensor | Iterable[int]) -> torch.Tensor:
    if isinstance(relative_position, int) and not isinstance(relative_position, bool):
        relative_position = torch.tensor(relative_position)  # one distance, not a length
    return as_positions(relative_position, name="relative_position")


def t5_relative_bucket(
    relative_position: int | torch.Tensor | Iterable[int],
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket of each relative position (Raffel et al., 2020, https://arxiv.org/abs/1910.10683, §2.1).

    With ``bidirectional`` the buckets are halved: keys before the query (relative position ≤ 0) use
    buckets 0 … n−1, keys after it n … 2n−1, n = ``num_buckets`` // 2, by distance d = |relative position|.
    Otherwise only keys before the query count (d = max(−relative position, 0), later keys share bucket 0)
    and n = ``num_buckets``. Within the n buckets, distances d < e = n // 2 get bucket d; larger ones get
    e + ⌊ln(d/e) / ln(max_distance/e) · (n − e)⌋, at most n − 1, so every d ≥ ``max_distance`` shares
    bucket n − 1.

    The logarithm is taken in float32 in T5's order of operations, so that where the exact value is an
    integer (d/e a power of max_distance/e with a whole exponent) the rounding, and hence the bucket,
    is T5's; an odd ``num_buckets`` leaves its last bucket unused, as in T5.

    Args:
        relative_position: key position − query position, integers of any shape.
        bidirectional: encoder (True) or causal decoder (False) buckets.
        num_buckets: number of buckets (32 in T5).
        max_distance: distance from which all positions share the last bucket (128 in T5).

    Returns:
        int64 buckets in [0, num_buckets), same shape as ``relative_position``.

    Raises:
        ValueError: float relative positions, ``num_buckets`` < 2 (< 4 when bidirectional: each half
            needs an exact bucket), ``max_distance`` not above the number of exact buckets e.
        TypeError: non-integer ``num_buckets`` or ``max_distance``.
    """
    positions = _relative_positions(relative_position)
    num_buckets = check_positive_int("num_buckets", num_buckets)
    max_distance = check_positive_int("max_distance", max_distance)
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        raise ValueError(
            f"num_buckets must be at least {minimum} "
            f"({'bidirectional' if bidirectional else 'unidirectional'}: at least one exact bucket), got {num_buckets}"
        )
    per_side = num_buckets // 2 if bidirectional else num_buckets
    exact = per_side // 2
    if max_distance <= exact:
        raise ValueError(f"max_distance must exceed the {exact} exact buckets, got {max_distance}")

    if bidirectional:
        offset = (positions > 0).to(torch.int64) * per_side  # keys after the query: upper half
        distance = positions.abs()
    else:
        offset = torch.zeros_like(positions)
        distance = (-positions).clamp_min(0)
    # e + ⌊ln(d/e)/ln(max_distance/e)·(n − e)⌋ in float32, as T5 computes it; d < e is masked below
    ratio = distance.clamp_min(exact).to(torch.float32) / exact
    logarithmic = exact + (torch.log(ratio) / math.log(max_distance / exact) * (per_side - exact)).to(
        torch.int64
    )
    logarithmic = logarithmic.clamp_max(per_side - 1)
    return offset + torch.where(distance < exact, distance, logarithmic)


def _window(window: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(window, (tuple, list)):
        if len(window) != 2:
            raise ValueError(f"window must be an int or (height, width), got {window!r}")
        return check_positive_int("window height", window[0]), check_positive_int("window width", window[1])
    size = check_positive_int("window", window)
    return size, size


def swin_table_size(window: int | tuple[int, int]) -> int:
    """Rows (2Wh−1)(2Ww−1) of a Swin relative-position bias table (Liu et al., 2021, https://arxiv.org/abs/2103.14030).

    Raises:
        ValueError: a window side < 1 (named), a sequence that is not (height, width).
    """
    height, width = _window(window)
    return (2 * height - 1) * (2 * width - 1)


def swin_relative_index(
    window: int | tuple[int, int], *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Swin's relative position index (Liu et al., 2021, https://arxiv.org/abs/2103.14030, §3.2).

    Tokens p = (y₁, x₁), q = (y₂, x₂) of a Wh×Ww window, numbered in row-major order, look up row
    (y₁ − y₂ + Wh − 1)·(2Ww − 1) + (x₁ − x₂ + Ww − 1) of a table of ``swin_table_size(window)`` rows.

    Args:
        window: side Wh = Ww, or (Wh, Ww).

    Returns:
        int64 ``[N, N]``, N = Wh·Ww: row p, column q.

    Raises:
        ValueError: a window side < 1 (named), a sequence that is not (height, width).
    """
    height, width = _window(window)
    y, x = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )  # [Wh, Ww] each
    y, x = y.flatten(), x.flatten()  # [N]: token n = y·Ww + x
    dy = y[:, None] - y[None, :] + (height - 1)  # [N, N], 0 … 2Wh−2
    dx = x[:, None] - x[None, :] + (width - 1)  # [N, N], 0 … 2Ww−2
    return dy * (2 * width - 1) + dx
