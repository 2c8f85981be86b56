"""Positions counted from the content (CoPE's gates), read on a short sample sentence through the
encoding's own ``counted_positions(q, k)``; nothing here knows an encoding by name."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc._validation import check_positive_int
from posenc.encodings import PositionalEncoding
from posenc.encodings.views import view

#: The sample sentence: two short sentences, so that a gate which learned to count "." would count 2.
SAMPLE_SENTENCE = ("the", "cat", "sat", "on", "the", "mat", ".", "then", "it", "slept", ".")
#: Width of the random token embeddings the sample's queries and keys are projected from.
SAMPLE_WIDTH = 32


@dataclass(frozen=True)
class CountedPositions:
    """The counted positions of the last query of a sentence to each of its tokens."""

    words: tuple[str, ...]  # the tokens, in order
    counted: torch.Tensor  # [s] float64: p_(s−1, j) for every key j, as the encoding counts them
    token_count: torch.Tensor  # [s] float64: s − j, the count if every gate were 1 (token positions)


def _projections(words: tuple[str, ...], d_head: int, width: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Queries and keys ``[1, 1, s, d_head]`` (float64) of the words: each distinct word a fixed random
    embedding (one row of a random table, so a repeated word repeats its vector), projected by fixed
    random W_q and W_k scaled by 1/√width."""
    generator = torch.Generator().manual_seed(seed)
    vocabulary = sorted(set(words))
    table = torch.randn(len(vocabulary), width, generator=generator, dtype=torch.float64)
    x = table[[vocabulary.index(word) for word in words]]  # [s, width]
    w_q, w_k = torch.randn(2, width, d_head, generator=generator, dtype=torch.float64) / math.sqrt(width)
    return (x @ w_q)[None, None], (x @ w_k)[None, None]  # [1, 1, s, d_head] each


def sentence_counts(
    encoding: PositionalEncoding,
    words: tuple[str, ...] = SAMPLE_SENTENCE,
    *,
    width: int = SAMPLE_WIDTH,
    seed: int = 0,
) -> CountedPositions:
    """The positions the ``counted_positions`` view gives the last query of ``words``, against
    the token count s − j, with one head whose q and k come from a fixed random embedding of each word
    and fixed random projections (drawn from ``seed``: an untrained stand-in for a model's).

    Raises:
        TypeError: an encoding that declares no ``counted_positions`` view.
        ValueError: no words, a width below 1.
    """
    if "counted_positions" not in encoding.views:
        raise TypeError(f"{type(encoding).__name__} gives no counted_positions(q, k) view")
    words = tuple(str(word) for word in words)
    if not words:
        raise ValueError("words must hold at least one token, got none")
    d_head = encoding.d_head or 16
    q, k = _projections(words, d_head, check_positive_int("width", width), seed)
    with torch.no_grad():
        counted = view(encoding, "counted_positions", q, k)[0, 0, -1]  # [s]: the last query to every key
    counted = counted.to(torch.float64)
    token_count = torch.arange(len(words), 0, -1, dtype=torch.float64)  # s − j
    return CountedPositions(words, counted, token_count)


__all__ = ["SAMPLE_SENTENCE", "CountedPositions", "sentence_counts"]
