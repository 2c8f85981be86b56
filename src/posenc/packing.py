"""Packed sequences and continued positions: the document ids attention masks by, the documents of a
row as segments, and the positions of a call after a KV cache (the one place its offset is read)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from posenc._validation import row_shapes, same_shape
from posenc.encodings.base import resolve_positions

if TYPE_CHECKING:
    from posenc.kv_cache import KVCache


def continued_positions(
    positions: torch.Tensor | None, x: torch.Tensor, cache: KVCache | None, columns: int = 1
) -> torch.Tensor:
    """Positions of x's tokens ``[s]`` or ``[b, s]`` (``[s, n]`` / ``[b, s, n]`` with n columns): those
    given, or the cache's continuation from ``cache.next_position`` (from 0 without a cache; on n axes
    from each row's own largest coordinate), on every axis. The one place the KV offset is read."""
    if cache is not None and cache.positions_move and positions is not None:
        raise ValueError(
            "a cache keeping sinks and a window places tokens at their places in the cache (StreamingLLM); "
            "give no positions with it"
        )
    start = 0 if cache is None else cache.next_position(columns, incoming=x.shape[1])
    return resolve_positions(positions, x, seq_dim=1, columns=columns, start=start)


def document_ids(
    documents: torch.Tensor | None, x: torch.Tensor, cache: KVCache | None = None
) -> torch.Tensor | None:
    """Document ids of packed sequences, ``[s]`` or ``[b, s]`` int64 on x's device (x ``[b, s, …]``), or None.

    A row packs documents one after another: ids never decrease along it (``[0, 0, 0, 1, 1, 2]``), and
    each document's tokens attend only to each other. Positions stay the caller's: give each document
    its own (restarting at 0), so that each gets what it gets alone.

    Raises:
        TypeError: ids that are not integers.
        ValueError: a shape other than ``[s]`` / ``[b, s]``, ids that decrease along a row (documents
            must be contiguous), documents with a KV cache (decode each document with its own).
    """
    if documents is None:
        return None
    if cache is not None:
        raise ValueError("documents with a KV cache: decode each document with a cache of its own")
    if (
        not isinstance(documents, torch.Tensor)
        or documents.dtype == torch.bool
        or documents.is_floating_point()
        or documents.is_complex()
    ):
        raise TypeError(
            f"documents must be an integer tensor of ids, got {getattr(documents, 'dtype', type(documents).__name__)}"
        )
    batch, seq_len = x.shape[0], x.shape[1]
    if same_shape(documents.shape, (1, seq_len)):  # one row for the whole batch
        documents = documents[0]
    if not (same_shape(documents.shape, (seq_len,)) or same_shape(documents.shape, (batch, seq_len))):
        raise ValueError(
            f"documents must have shape {row_shapes((seq_len,), batch)} to match an input of shape "
            f"{tuple(x.shape)}, got {tuple(documents.shape)}"
        )
    documents = documents.to(dtype=torch.int64, device=x.device)
    if not torch.compiler.is_compiling() and seq_len > 1:
        decreasing = (documents.diff(dim=-1) < 0).nonzero()
        if decreasing.numel():
            where = tuple(int(i) for i in decreasing[0])
            raise ValueError(
                f"documents must be packed one after another (ids that never decrease along a row), got a "
                f"decrease after index {where[-1]}{f' of row {where[0]}' if len(where) == 2 else ''}"
            )
    return documents


#: Most SDPA calls packed documents take one document at a time; more take one masked call.
MAX_DOCUMENT_CALLS = 256


def document_segments(documents: torch.Tensor) -> list[tuple[slice, int, int]] | None:
    """The documents of ``[s]`` / ``[b, s]`` ids as (batch rows, start, end): every row at once where
    the rows share their documents, else row by row; None beyond :data:`MAX_DOCUMENT_CALLS` of them."""
    if documents.dim() == 2 and bool((documents == documents[:1]).all()):
        documents = documents[0]
    rows = (
        [(slice(None), documents)]
        if documents.dim() == 1
        else [(slice(row, row + 1), ids) for row, ids in enumerate(documents)]
    )
    segments = []
    for batch, ids in rows:
        starts = [0, *((ids[1:] != ids[:-1]).nonzero().flatten() + 1).tolist(), ids.shape[0]]
        segments.extend((batch, start, end) for start, end in itertools.pairwise(starts))
        if len(segments) > MAX_DOCUMENT_CALLS:
            return None
    return segments


__all__ = ["MAX_DOCUMENT_CALLS", "continued_positions", "document_ids", "document_segments"]
