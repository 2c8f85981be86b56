"""Extra rows of ``posenc bench attention``: peer and naive forms of an encoding's attention, declared.

The attention bench times every registered encoding on every backend through ``MultiHeadAttention``; an
extra is a row that is not that: a naive materialised form, a functional kernel, what libraries do. Each
declares the encoding it is a form of (and so the float64 oracle it is checked against: that encoding's)
and what it is compared with. It computes the same function of the layer's input ``x [b, s, d_model]`` as
the layer itself, with the layer's own weights, so its time and its error read against the layer's rows.

An extra is registered with :func:`extra`; posenc's are in :mod:`posenc.bench.peers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: A naive row runs only where its [b, h, i, j, d] float32 tensor fits in this (8 heads of 64 at s=1024: 2 GiB).
NAIVE_LIMIT_BYTES = 2 << 30
#: Lengths the sweep tries first for a naive row, below the sweep's own (its [b, h, i, j, d] tensor alone is
#: 32 GiB at s=4096, so the longest s within 16 GiB lies below it).
NAIVE_SWEEP: tuple[int, ...] = (1024, 1536, 2048, 3072)

#: (layer, positions) -> a function of x ``[b, s, d_model]`` giving the layer's output ``[b, s, d_model]``.
Make = Callable[[torch.nn.Module, torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


@dataclass(frozen=True)
class Extra:
    """A declared extra row.

    Attributes:
        name: the row's name; ``{encoding}`` is replaced by the encoding's registered name.
        compares_with: what it is compared with, in words (the rows of its encoding it stands beside).
        what: how it computes attention.
        make: builds its call from the encoding's layer (its weights) and positions ``[s]``.
        encoding: the registered encoding it is a form of; None: every encoding ``applies`` accepts.
        applies: for ``encoding=None``, which encodings get the row (read from what they declare).
        pairs: whether it holds a ``[b, h, i, j, d]`` float32 tensor (not run beyond
            :data:`NAIVE_LIMIT_BYTES`; swept from :data:`NAIVE_SWEEP`).
    """

    name: str
    compares_with: str
    what: str
    make: Make
    encoding: str | None = None
    applies: Callable[[object], bool] | None = None
    pairs: bool = False

    def for_encoding(self, name: str, encoding) -> bool:
        """Whether this extra is a row of the encoding registered as ``name`` (instance ``encoding``)."""
        if self.encoding is not None:
            return self.encoding == name
        return self.applies is not None and bool(self.applies(encoding))

    def row_name(self, name: str) -> str:
        """The row's name for the encoding registered as ``name``."""
        return self.name.format(encoding=name)

    def not_run(self, seq_len: int, heads: int, d_head: int, batch: int) -> str | None:
        """Why the row is not run at ``seq_len`` (its [b, h, i, j, d] tensor too large), or None."""
        size = batch * heads * seq_len * seq_len * d_head * 4
        if not self.pairs or size <= NAIVE_LIMIT_BYTES:
            return None
        return f"not run: its [b, h, i, j, d] tensor would hold {size / 2**30:g} GiB"


#: label -> the declared extra, in the order of registration.
EXTRAS: dict[str, Extra] = {}


def extra(row: Extra) -> Extra:
    """Declare ``row``; ValueError for a label already declared."""
    if row.name in EXTRAS:
        raise ValueError(f"an extra row named {row.name!r} is already declared")
    if (row.encoding is None) == (row.applies is None):
        raise ValueError(f"extra {row.name!r}: give exactly one of encoding and applies")
    EXTRAS[row.name] = row
    return row


def heads_of(layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The layer's q, k, v of x ``[b, s, d_model]``: ``[b, h, s, d]`` each, unrotated."""
    b, s, _ = x.shape

    def split(projection, n) -> torch.Tensor:
        return projection(x).view(b, s, n, layer.d_head).transpose(1, 2)

    return (
        split(layer.q_proj, layer.n_heads),
        split(layer.k_proj, layer.n_kv_heads),
        split(layer.v_proj, layer.n_kv_heads),
    )


def merged(layer, out: torch.Tensor) -> torch.Tensor:
    """Attention's output ``[b, h, s, d]`` through the layer's output projection: ``[b, s, d_model]``."""
    b, h, s, d = out.shape
    return layer.out_proj(out.transpose(1, 2).reshape(b, s, h * d))


def causal_softmax(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(scores + causal mask)·v for scores ``[b, h, i, j]``: ``[b, h, i, d]``."""
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
