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


__all__ = ["VIEWS", "frequencies", "frequency_pieces", "view"]
