"""The views an encoding gives to analysis, figures and the report, read through one accessor.

The attention contract (``embed``, ``rotate``, ``bias``, ``score_mod``, ``score_terms``, ``value_terms``)
lives on :class:`~posenc.encodings.base.PositionalEncoding`; what analysis reads about an encoding does
not. An encoding gives a view by declaring its name in ``views`` and defining its method; the base class
defines none of them, so a reader asks :func:`view`, which answers None for a view that is not declared
instead of calling a default. The methods, by view name:

- ``codes(positions)``: the code ``[..., d_model]`` that ``embed`` joins to the embeddings at integer positions.
- ``rotation_tables(positions)``: float64 cos and sin ``[..., r/2]`` of the rotation at integer positions.
- ``frequencies``: from ``frequency_pieces()``, the angular frequencies ω_k as float64 pieces ``[pairs, P]``
  whose sum is ω_k beyond float64 precision (for exact angles); :func:`frequencies` sums them ``[pairs]``.
- ``rotary_spectrum()``: the rotated channels, base and layout (:class:`~posenc.encodings.base.RotarySpectrum`).
- ``bias``: the base's ``bias``/``score_mod`` hooks, given where the bias reads positions alone.
- ``distance_bias(distances)``: the bias ``[h, n]`` at query − key distances ``[n]`` when it depends on the
  distance alone; attention's per-distance fast path reads it (one table, a strided view per query).
- ``bucketing()``: (num_buckets, max_distance) of T5's buckets (:func:`posenc.functional.t5_relative_bucket`).
- ``bucket_table()``: the learned bias per bucket and head, float64 ``[buckets, h]``.
- ``offset_table()``: the bias per head on the grid of 2-D offsets of a window, float64 ``[h, 2Wh−1, 2Ww−1]``.
- ``counted_positions(q, k)``: positions counted from queries ``[b, h, i, d]`` and keys ``[b, h_kv, j, d]``
  (CoPE's gates), ``[b, h, i, j]``.
- ``closed_form_dot(distances)``: the dot product of two codes at each distance ``[n]`` by a closed form.
- ``shift_map(offset)``: the fixed matrix M_k ``[w, w]`` with code(pos + k) = M_k·code(pos).
- ``translations(seq_len, shifts)``: positions and the shifts at which a shift of every position is a
  translation, where the default of :func:`translations` is not (Swin's window, whose rows must not wrap).

Two readings of an encoding's positions that every analysis shares are functions here:
:func:`along_line` (the line the 1-D claims are measured on) and :func:`translations`.
"""

from __future__ import annotations

import torch

from posenc.encodings.base import VIEWS, PositionalEncoding


def view(encoding: PositionalEncoding, name: str, *args):
    """What view ``name`` of ``encoding`` gives for ``args``, or None where the encoding declares no such view."""
    if name not in VIEWS:
        raise ValueError(f"unknown view {name!r}; the views are {', '.join(VIEWS)}")
    if name not in encoding.views:
        return None
    if name == "frequencies":
        return frequencies(encoding)
    return getattr(encoding, name)(*args)


def frequency_pieces(encoding: PositionalEncoding) -> torch.Tensor | None:
    """The angular frequencies ω_k as float64 pieces ``[pairs, P]`` summing to ω_k beyond float64, or None."""
    return encoding.frequency_pieces() if "frequencies" in encoding.views else None


def frequencies(encoding: PositionalEncoding) -> torch.Tensor | None:
    """The angular frequencies ω_k, float64 ``[pairs]`` (the sum of ``frequency_pieces``), or None."""
    pieces = frequency_pieces(encoding)  # [pairs, P] float64
    return None if pieces is None else pieces.sum(dim=-1)


def along_line(encoding: PositionalEncoding, positions: torch.Tensor) -> torch.Tensor:
    """Positions ``[...]`` on one line as ``encoding`` takes them: themselves on one axis, the diagonal
    ``[..., n]`` (every coordinate equal, where M-RoPE puts text) on n axes. Analysis measures the 1-D
    claims (codes, rotations, decay with distance) along it."""
    n = encoding.position_space.columns
    return positions if n == 1 else positions.unsqueeze(-1).expand(*positions.shape, n)


def translations(
    encoding: PositionalEncoding, seq_len: int, shifts: tuple | None = None
) -> tuple[torch.Tensor, tuple]:
    """Positions ``[s]`` and shifts Δ at which a shift of every position is a translation for ``encoding``.

    The relative-position test compares attention logits at ``positions`` and ``positions + Δ``. The
    encoding's ``translations`` view where it gives one; otherwise 0 … seq_len − 1 and Δ = 1, 7, 100, kept
    inside ``position_limit``; on n axes, a grid of about ``seq_len`` tokens ``[s, n]`` and shift vectors Δ
    (1, 7 and 100 along each axis, and 3 along all of them: the grid translation test).

    Raises:
        ValueError: a given shift that leaves the encoding's positions, or no room to shift at all.
    """
    if "translations" in encoding.views:
        return encoding.translations(seq_len, shifts)
    if encoding.position_space.columns > 1:
        return _grid_translations(encoding.position_space.columns, seq_len, shifts)
    limit = encoding.position_space.limit
    if limit is not None:
        seq_len = min(seq_len, limit // 2)
        if seq_len < 1:
            raise ValueError(f"a table of {limit} positions leaves no room to shift a position")
    if shifts is None:
        shifts = (1, 7, 100) if limit is None else tuple(s for s in (1, 7, 100) if seq_len + s <= limit)
    for shift in shifts:
        if limit is not None and not (0 <= shift and seq_len + shift <= limit):
            raise ValueError(f"shift {shift} moves positions 0 … {seq_len - 1} outside the table of {limit}")
    return torch.arange(seq_len), tuple(shifts)


def _grid_translations(
    n: int, seq_len: int, shifts: tuple | None
) -> tuple[torch.Tensor, tuple[tuple[int, ...], ...]]:
    side = max(2, round(seq_len ** (1 / n)))
    grid = torch.stack(torch.meshgrid(*[torch.arange(side)] * n, indexing="ij"), dim=-1).reshape(
        -1, n
    )  # [s, n]
    if shifts is None:
        unit = torch.eye(n, dtype=torch.int64)
        shifts = tuple(tuple((step * unit[a]).tolist()) for step in (1, 7, 100) for a in range(n))
        shifts += ((3,) * n,)
    for shift in shifts:
        if not isinstance(shift, tuple) or len(shift) != n:
            raise ValueError(f"a shift of positions on {n} axes is a tuple of {n} ints, got {shift!r}")
    return grid, tuple(shifts)


__all__ = ["VIEWS", "along_line", "frequencies", "frequency_pieces", "translations", "view"]
