"""The Forgetting Transformer's bias: the sum of the log forget gates between a key and its query.

Lin, Nikishin, He and Courville, 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
https://arxiv.org/abs/2503.02130 (ICLR 2025), eq. (5): with forget gates f_l ∈ (0, 1) per token and head,
the logit of query i and key j ≤ i gains D_ij = Σ_{l=j+1}^{i} log f_l = c_i − c_j, c the cumulative sum
of log f along the sequence, so only the cumulative sums ``[b, h, s]`` are ever computed per token.

Precision: c is summed in float64, and a float32 bias takes c as two float32 pieces (c = hi + lo), so
D_ij = (hi_i − hi_j) + (lo_i − lo_j) is within one float32 rounding of D_ij itself, not of |c_i|: a float32
cumulative sum over thousands of tokens would lose the bias of the nearest keys to the size of the sum.

Notation used for tensor shapes: b batch, h heads, i / j query / key positions.
"""

from __future__ import annotations

import torch


def forget_bias(log_gates: torch.Tensor, queries: int) -> torch.Tensor:
    """D ``[b, h, i, j]`` from the log forget gates of the keys ``[b, j, h]``; the queries are the last
    ``queries`` = i of the keys (as in decoding after a KV cache).

    D_ij = c_i − c_j = Σ_{l=j+1}^{i} log f_l for keys j ≤ i, in log f's dtype promoted to at least float32
    (see the module on precision). Keys after the query (bidirectional attention, which the paper does not
    define) get the decay through the same gates between them, Σ_{l=i+1}^{j} log f_l = c_j − c_i.
    """
    c = cumulative_log_gates(log_gates)  # [b, h, j]
    keys = c.shape[-1]
    dtype = torch.promote_types(log_gates.dtype, torch.float32)
    return forget_bias_block(c, range(keys - queries, keys), range(keys), dtype)  # [b, h, i, j]


def cumulative_log_gates(log_gates: torch.Tensor) -> torch.Tensor:
    """c = cumsum(log f) ``[b, h, j]`` in float64 from the log forget gates ``[b, j, h]``."""
    return log_gates.to(torch.float64).cumsum(dim=1).transpose(1, 2)


def forget_bias_block(cumulative: torch.Tensor, rows: range, keys: range, dtype: torch.dtype) -> torch.Tensor:
    """D ``[b, h, n, m]`` in ``dtype`` for the queries at key indices ``rows`` and the keys ``keys`` from the
    float64 cumulative log gates ``[b, h, j]`` (:func:`cumulative_log_gates`): c_i − c_j, and c_j − c_i for
    keys after the query; below float64, from c's two pieces in ``dtype`` (the module's precision)."""
    device = cumulative.device
    pieces = [cumulative]
    if dtype != cumulative.dtype:
        high = cumulative.to(dtype)
        pieces = [high, (cumulative - high.to(cumulative.dtype)).to(dtype)]  # c = high + low
    difference = sum(
        piece[..., rows.start : rows.stop, None] - piece[..., None, keys.start : keys.stop] for piece in pieces
    )  # [b, h, n, m]
    after = torch.arange(rows.start, rows.stop, device=device)[:, None] < torch.arange(
        keys.start, keys.stop, device=device
    )
    return torch.where(after, -difference, difference)


__all__ = ["cumulative_log_gates", "forget_bias", "forget_bias_block"]
