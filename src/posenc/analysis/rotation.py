"""Properties of rotary encodings as numbers: norms kept, logits relative, shifts linear (seed 004 §2.2, §4.3)."""

from __future__ import annotations

import math

import torch

from posenc._validation import check_choice, check_int
from posenc.encodings import PositionalEncoding, SinusoidalEncoding
from posenc.encodings.views import along_line
from posenc.functional.rope import LAYOUTS


def rotation_matrix(
    angles: torch.Tensor, *, layout: str = "interleaved", width: int | None = None
) -> torch.Tensor:
    """The block-diagonal rotation R for angles ``[..., r/2]`` as a matrix ``[..., w, w]`` (w ≥ r).

    Pair k occupies channels (2k, 2k+1) for ``"interleaved"`` and (k, k + r/2) for ``"half"``;
    channels past r are left unchanged (identity), as in partial rotary.

    Raises:
        ValueError: a ``width`` below r = 2·angles.shape[-1] (the pairs would not fit).
    """
    check_choice("layout", layout, LAYOUTS)
    half = angles.shape[-1]
    rotary = 2 * half
    width = rotary if width is None else check_int("width", width)
    if width < rotary:
        raise ValueError(
            f"width must be at least r = {rotary} (2 × {half} angles) to hold every pair, got {width}"
        )
    first = torch.arange(0, rotary, 2) if layout == "interleaved" else torch.arange(half)
    second = first + 1 if layout == "interleaved" else first + half
    matrix = torch.eye(width, dtype=angles.dtype).expand(*angles.shape[:-1], width, width).clone()
    cos, sin = torch.cos(angles), torch.sin(angles)
    matrix[..., first, first] = cos
    matrix[..., first, second] = -sin
    matrix[..., second, first] = sin
    matrix[..., second, second] = cos
    return matrix


def sinusoidal_shift_matrix(offset: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """M_k with PE(pos + k) = M_k · PE(pos) for the sinusoidal code (sin at 2i, cos at 2i+1), ``[d, d]``.

    [sin(a+b), cos(a+b)] = [[cos b, sin b], [−sin b, cos b]] · [sin a, cos a], b = k·ω_i, built from
    the same exact frequencies and angle reduction as the table.
    """
    return SinusoidalEncoding(d_model, base=base).shift_map(check_int("offset", offset))


def linear_map_residual(table: torch.Tensor, offset: int, shift: torch.Tensor) -> float:
    """max |PE(pos + k) − M_k · PE(pos)| over a code table ``[T, d]`` for M_k = ``shift`` ``[d, d]``
    (0 at float64 rounding where M_k is the code's shift map).

    Raises:
        ValueError: an ``offset`` k outside 1 … T−1 (no pair pos, pos + k in the table: 0 and ≥ T would
            fail inside torch, and a negative k would compare the wrong rows, PE(T + k) with M_k·PE(0)).
    """
    offset = check_int("offset", offset)
    if not 1 <= offset < table.shape[0]:
        raise ValueError(
            f"offset must lie in 1 … {table.shape[0] - 1} (a table of {table.shape[0]} positions), got {offset}"
        )
    table = table.to(torch.float64)  # [T, d]
    return float((table[offset:] - table[:-offset] @ shift.to(torch.float64).T).abs().max())


def relative_logit_deviation(
    encoding: PositionalEncoding,
    *,
    d_head: int,
    seq_len: int = 64,
    shifts: tuple[int, ...] = (1, 17, 1000, 123_457),
    n_heads: int = 2,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> float:
    """max |q'·k' at positions + Δ − q'·k' at positions| over random q, k and the shifts Δ.

    Measured through the encoding's own ``rotate`` hook: 0 (at rounding) when q·k depends only
    on m − n, as RoPE claims; large when the rotation depends on absolute position. NaN when the
    logits are NaN at any shift (a NaN is never dropped in favour of the other shifts).

    Raises:
        ValueError: no ``shifts`` (nothing to measure).
    """
    shifts = tuple(check_int("shift", shift) for shift in shifts)
    if not shifts:
        raise ValueError(f"shifts must name at least one shift to measure, got {shifts!r}")
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, n_heads, seq_len, d_head, generator=generator, dtype=dtype)  # [b, h, s, d]
    k = torch.randn(1, n_heads, seq_len, d_head, generator=generator, dtype=dtype)
    positions = torch.arange(seq_len)

    def logits(offset: int) -> torch.Tensor:
        moved = along_line(encoding, positions + offset)  # on several axes, along the diagonal
        q_rot, k_rot = encoding.rotate(q, k, moved, moved)
        return q_rot @ k_rot.transpose(-1, -2)  # [b, h, i, j]

    base = logits(0)
    changes = [float((logits(shift) - base).abs().max()) for shift in shifts]
    return math.nan if any(math.isnan(change) for change in changes) else max(changes)


def norm_change(
    encoding: PositionalEncoding, *, d_head: int, seq_len: int = 64, dtype=torch.float64, seed: int = 0
) -> float:
    """max | ‖rotate(x)‖ − ‖x‖ | over random vectors at positions 0 … seq_len−1 (0 for a rotation)."""
    generator = torch.Generator().manual_seed(seed)
    heads = encoding.n_heads or 2  # an encoding that turns each head its own way takes all its heads
    x = torch.randn(1, heads, seq_len, d_head, generator=generator, dtype=dtype)
    positions = along_line(encoding, torch.arange(seq_len))
    rotated, _ = encoding.rotate(x, x, positions, positions)
    return float((rotated.norm(dim=-1) - x.norm(dim=-1)).abs().max())
