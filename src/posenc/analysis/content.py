"""What an encoding that reads the content (FoX's gates, PaTH's transforms, stick-breaking) does to one
fixed random input: its content terms and the attention weights, per head, through its own hooks."""

from __future__ import annotations

import copy
import math

import torch

from posenc._validation import check_positive_int
from posenc.analysis.shift import attention_logits, probe_widths
from posenc.encodings import PositionalEncoding
from posenc.encodings.views import along_line


def content_terms(encoding: PositionalEncoding, seq_len: int, *, seed: int = 0) -> torch.Tensor:
    """The terms ``content_terms`` adds to the logits ``[h, s, s]`` (float64, keys after the query NaN)
    for the random tokens and projections of :func:`posenc.analysis.shift.attention_logits` at
    positions 0 … s − 1; zeros for an encoding that reads no content."""
    seq_len = check_positive_int("seq_len", seq_len)
    positions = along_line(encoding, torch.arange(seq_len))
    encoding = copy.deepcopy(encoding).to(torch.float64)
    widths = probe_widths(encoding)
    d_model, n_heads, d_head = widths["d_model"], widths["n_heads"], widths["d_head"]
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, seq_len, d_model, generator=generator, dtype=torch.float64)  # [1, s, d]
    with torch.no_grad():
        e = encoding.embed(x, positions)  # [1, s, d']
        width = e.shape[-1]
        w_q, w_k = torch.randn(2, width, n_heads * d_head, generator=generator, dtype=torch.float64)
        w_q, w_k = w_q / math.sqrt(width), w_k / math.sqrt(width)
        q = (e @ w_q).view(1, seq_len, n_heads, d_head).transpose(1, 2)  # [1, h, s, d_head]
        k = (e @ w_k).view(1, seq_len, n_heads, d_head).transpose(1, 2)
        q, k = encoding.rotate(q, k, positions, positions)
        content = encoding.content(e)  # [1, s, c] or None
        terms = None if content is None else encoding.content_terms(q, k, content, content)
    terms = torch.zeros(n_heads, seq_len, seq_len, dtype=torch.float64) if terms is None else terms[0]
    return terms.masked_fill(_after(seq_len), float("nan"))


def attention_weights(encoding: PositionalEncoding, seq_len: int, *, seed: int = 0) -> torch.Tensor:
    """The causal attention weights ``[h, s, s]`` (float64, keys after the query NaN) of
    :func:`posenc.analysis.shift.attention_logits`: softmax over the keys up to each query. For
    stick-breaking these are its weights A_ij, with the stick left over on the diagonal."""
    positions = along_line(encoding, torch.arange(check_positive_int("seq_len", seq_len)))
    logits = attention_logits(encoding, positions, seed=seed).masked_fill(_after(seq_len), float("-inf"))
    return logits.softmax(dim=-1).masked_fill(_after(seq_len), float("nan"))


def _after(seq_len: int) -> torch.Tensor:
    """``[s, s]``: True for the keys after each query."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)


__all__ = ["attention_weights", "content_terms"]
