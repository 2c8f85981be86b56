"""The Forgetting Transformer's bias: the sum of the log forget gates between a key and its query.

Lin, Nikishin, He and Courville, 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
https://arxiv.org/abs/2503.02130 (ICLR 2025), eq. (5): with forget gates f_l ∈ (0, 1) per token and head,
the logit of query i and key j ≤ i gains D_ij = Σ_{l=j+1}^{i} log f_l = c_i − c_j, c the cumulative sum
of log f along the sequence, so only the cumulative sums ``[b, h, s]`` are ever computed per token.

Notation used for tensor shapes: b batch, h heads, i / j query / key positions.
"""

from __future__ import annotations

import torch


def forget_bias(log_gates: torch.Tensor, queries: int) -> torch.Tensor:
    """D ``[b, h, i, j]`` from the log forget gates of the keys ``[b, j, h]``; the queries are the last
    ``queries`` = i of the keys (as in decoding after a KV cache).

    D_ij = c_i − c_j = Σ_{l=j+1}^{i} log f_l for keys j ≤ i, with c = cumsum(log f) in at least float32
    (float64 stays float64). Keys after the query (bidirectional attention, which the paper does not
    define) get the decay through the same gates between them, Σ_{l=i+1}^{j} log f_l = c_j − c_i.
    """
    c = cumulative_log_gates(log_gates)  # [b, h, j]
    keys = c.shape[-1]
    return forget_bias_block(c, range(keys - queries, keys), range(keys))  # [b, h, i, j]


def cumulative_log_gates(log_gates: torch.Tensor) -> torch.Tensor:
    """c = cumsum(log f) ``[b, h, j]`` from the log forget gates ``[b, j, h]``, in at least float32."""
    return log_gates.to(torch.promote_types(log_gates.dtype, torch.float32)).cumsum(dim=1).transpose(1, 2)


def forget_bias_block(cumulative: torch.Tensor, rows: range, keys: range) -> torch.Tensor:
    """D ``[b, h, n, m]`` for the queries at key indices ``rows`` and the keys ``keys`` from the cumulative
    log gates ``[b, h, j]`` (:func:`cumulative_log_gates`): c_i − c_j, c_j − c_i for keys after the query."""
    device = cumulative.device
    difference = cumulative[..., rows.start : rows.stop, None] - cumulative[..., None, keys.start : keys.stop]
    after = torch.arange(rows.start, rows.stop, device=device)[:, None] < torch.arange(
        keys.start, keys.stop, device=device
    )
    return torch.where(after, -difference, difference)


__all__ = ["cumulative_log_gates", "forget_bias", "forget_bias_block"]
