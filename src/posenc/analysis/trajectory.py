"""One vector rotated by a rotary encoding at successive positions, as 2-D points per frequency pair (seed 004 §4.2)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from posenc._validation import as_positions, check_choice, check_even_positive_int
from posenc.encodings import PositionalEncoding
from posenc.encodings.rope import UNROTATED
from posenc.encodings.views import along_line, view
from posenc.functional.rope import LAYOUTS


def pair_channels(
    rotary_dim: int, layout: str = "half", *, d_head: int | None = None, unrotated: str = "last"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The channels (a_k, b_k) that pair k rotates: (k, k + r/2) for ``"half"``, (2k, 2k+1) for
    ``"interleaved"``, counted from the first rotated channel: channel 0 where the d − r unrotated
    channels come last (the default), d_head − r where they come first (LTX-Video's ``unrotated="first"``).

    Returns:
        ``(first, second)``, int64 ``[r/2]`` each.

    Raises:
        ValueError: an odd or non-positive rotary_dim, an unknown layout or ``unrotated``, or
            ``unrotated="first"`` without a d_head of at least rotary_dim.
    """
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    check_choice("layout", layout, LAYOUTS)
    check_choice("unrotated", unrotated, UNROTATED)
    start = 0
    if unrotated == "first":
        if d_head is None or d_head < rotary_dim:
            raise ValueError(
                f'unrotated="first" puts the rotated channels after the others: it needs d_head ≥ '
                f"rotary_dim={rotary_dim}, got d_head={d_head}"
            )
        start = d_head - rotary_dim
    half = rotary_dim // 2
    if layout == "half":
        first = torch.arange(half) + start
        return first, first + half
    first = torch.arange(0, rotary_dim, 2) + start
    return first, first + 1


def rotation_trajectory(
    encoding: PositionalEncoding, vector: torch.Tensor, positions: int | torch.Tensor | Iterable[int]
) -> torch.Tensor:
    """The pairs (x'_a, x'_b) of ``vector`` rotated as a query at each position, float64 ``[n, r/2, 2]``.

    Measured through the encoding's own ``rotate`` hook, in float64, on the channels its
    ``rotary_spectrum`` declares (after the unrotated ones where those come first, as LTX-Video's); an
    encoding of several axes is measured along the diagonal (``along_line``). For plain RoPE, pair k of
    the vector at position m is its pair at position 0 turned by m·θ_k: a point moving on a circle.

    Args:
        encoding: a rotary encoding.
        vector: one head vector ``[d_head]``.
        positions: positions ``[n]`` (an int n means 0 … n−1).

    Raises:
        TypeError: an encoding without a ``rotary_spectrum`` view (the channels its pairs turn).
        ValueError: a vector that is not ``[d_head]``, non-integer positions.
    """
    if "rotary_spectrum" not in encoding.views:
        raise TypeError(
            f"encoding must be rotary with a rotary_spectrum view, got {type(encoding).__name__} of kind "
            f"{encoding.kind!r}"
        )
    if not isinstance(vector, torch.Tensor) or tuple(vector.shape) != (encoding.d_head,):
        shape = tuple(vector.shape) if isinstance(vector, torch.Tensor) else type(vector).__name__
        raise ValueError(f"vector must be a tensor [d_head={encoding.d_head}], got {shape}")
    positions = as_positions(positions).flatten()  # [n]
    x = vector.detach().to(torch.float64).expand(1, 1, positions.shape[0], encoding.d_head)  # [1, 1, n, d]
    along = along_line(encoding, positions)  # [n], or the diagonal [n, axes] of an encoding of several axes
    with torch.no_grad():
        rotated, _ = encoding.rotate(x, x, along, along)  # [1, 1, n, d]
    spectrum = view(encoding, "rotary_spectrum")
    first, second = pair_channels(
        spectrum.rotary_dim, spectrum.layout, d_head=encoding.d_head, unrotated=spectrum.unrotated
    )
    return torch.stack((rotated[0, 0][:, first], rotated[0, 0][:, second]), dim=-1)  # [n, r/2, 2]
