"""What an encoding holds, as plain float64 tensors: codes per position, bias per distance, bucket and offset tables.

These read an encoding through its own hooks (``codes``, ``bias``) or its learned table, so a figure
drawn from them shows the numbers the encoding adds, not a re-derivation of them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from posenc._validation import as_positions, check_positive_int
from posenc.encodings import PositionalEncoding
from posenc.encodings.views import along_line, view
from posenc.functional.relative import t5_relative_bucket


def code_table(encoding: PositionalEncoding, length: int) -> torch.Tensor:
    """The codes of positions 0 … length−1, one row per position, float64 ``[T, d_model]``.

    Raises:
        TypeError: an encoding that declares no ``codes`` view.
        ValueError: a non-positive ``length``, or one past a learned table's ``max_len``.
    """
    if "codes" not in encoding.views:
        raise TypeError(f"encoding must add a code per position, and {type(encoding).__name__} adds none")
    length = check_positive_int("length", length)
    with torch.no_grad():  # on several axes, along the diagonal
        return (
            view(encoding, "codes", along_line(encoding, torch.arange(length))).detach().to(torch.float64)
        )  # [T, d]


def bias_matrix(encoding: PositionalEncoding, positions: int | torch.Tensor | Iterable[int]) -> torch.Tensor:
    """The bias ``encoding.bias(positions, positions)`` every head adds to the logits, float64 ``[h, i, j]``.

    Args:
        encoding: an encoding with a bias hook.
        positions: query and key positions ``[s]`` (an int s means 0 … s−1).

    Raises:
        ValueError: an encoding that adds no bias (its ``bias`` returns None), non-integer positions.
    """
    positions = along_line(encoding, as_positions(positions).flatten())  # [s] (or the diagonal [s, n])
    with torch.no_grad():
        bias = encoding.bias(positions, positions)  # [h, s, s]
    if bias is None:
        raise ValueError(f"encoding {type(encoding).__name__} adds no attention bias (its bias hook is None)")
    return bias.detach().to(torch.float64)


def bias_by_distance(
    encoding: PositionalEncoding, distances: int | torch.Tensor | Iterable[int]
) -> torch.Tensor:
    """The attention bias at each query − key distance, per head, float64 ``[h, n]``.

    Read through ``encoding.bias`` with the query at q = max(0, max distance) and keys at q − d, so
    every position is non-negative; for a bias that depends on distance only (ALiBi, T5) the choice
    of q does not matter. Positive distances are keys before the query.

    Args:
        encoding: an encoding whose ``bias`` hook depends on the 1-D distance (not Swin: its
            positions are tokens of a 2-D window, see ``swin_offset_table``).
        distances: query − key distances ``[n]`` (an int n means 0 … n−1).

    Raises:
        TypeError: a Swin encoding.
        ValueError: an encoding that adds no bias (its ``bias`` returns None), non-integer distances.
    """
    if encoding.position_space.axes != 1:
        raise TypeError(
            f"encoding must bias by 1-D distance; {type(encoding).__name__}'s positions index tokens on "
            f"{encoding.position_space.axes} axes"
        )
    distances = as_positions(distances, name="distances").flatten()  # [n]
    query = max(int(distances.max()), 0)
    with torch.no_grad():
        bias = encoding.bias(torch.tensor([query]), query - distances)  # [h, 1, n]
    if bias is None:
        raise ValueError(f"encoding {type(encoding).__name__} adds no attention bias (its bias hook is None)")
    return bias[:, 0, :].detach().to(torch.float64)  # [h, n]


def swin_offset_table(encoding: PositionalEncoding) -> torch.Tensor:
    """Swin's learned table per head on the grid of 2-D offsets, float64 ``[h, 2Wh−1, 2Ww−1]``.

    Entry ``[h, dy + Wh − 1, dx + Ww − 1]`` is the bias head h adds between a query token and a key
    token dy rows and dx columns before it (dy = y_query − y_key, dx = x_query − x_key).

    Raises:
        TypeError: an encoding that declares no ``offset_table`` view.
    """
    if "offset_table" not in encoding.views:
        raise TypeError(f"encoding must hold a table of 2-D offsets (Swin), got {type(encoding).__name__}")
    return view(encoding, "offset_table")  # [h, 2Wh−1, 2Ww−1]


def t5_bucket_map(
    relative_positions: int | torch.Tensor | Iterable[int], *, num_buckets: int = 32, max_distance: int = 128
) -> dict[str, torch.Tensor]:
    """T5's bucket of each key − query position, for encoders and for causal decoders.

    Returns:
        ``{"bidirectional": int64 [n], "causal": int64 [n]}`` from ``t5_relative_bucket``.
    """
    relative_positions = as_positions(relative_positions, name="relative_positions")
    return {
        "bidirectional": t5_relative_bucket(
            relative_positions, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance
        ),
        "causal": t5_relative_bucket(
            relative_positions, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
        ),
    }
