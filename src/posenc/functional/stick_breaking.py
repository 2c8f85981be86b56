"""Stick-breaking attention's weights, in log space: each earlier key breaks off a share of what is left.

Tan, Shen, Yang, Courville and Panda, 2025, "Scaling Stick-Breaking Attention: An Efficient Implementation
and In-depth Study", https://arxiv.org/abs/2410.17980 (ICLR 2025). With β_ij = σ(z_ij), z_ij = q_i·k_j/√d,
the weight of key j < i is

    A_ij = β_ij · Π_{j<l<i} (1 − β_il),

the keys taken from the nearest back: the key just before the query breaks off β of the stick, the one
before it β of the rest, and so on. No softmax: the weights sum to 1 − Π_{l<i}(1 − β_il), and what is
left over, rem_i = Π_{l<i}(1 − β_il), goes to no key. In log space, log A_ij = log σ(z_ij) + Σ_{j<l<i}
log σ(−z_il), sums of log-sigmoids that never underflow where a product would.

Notation used for tensor shapes: b batch, h heads, i / j query / key positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def stick_breaking_log_weights(
    logits: torch.Tensor, first: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """log A ``[..., i, j]`` and log rem ``[..., i]`` from the logits z ``[..., i, j]``; query r stands at key
    ``first`` + r (default j − i: the queries are the last i of the keys). Keys given are all the keys
    before each query (a block of queries takes the keys up to its last one).

    log A_ij = log σ(z_ij) + Σ_{j<l<i} log σ(−z_il) for the keys before the query, −inf for the others
    (the query's own key and those after it); log rem_i = Σ_{l<i} log σ(−z_il). The sum over l is an
    exclusive cumulative sum from the query back (no difference of two sums, so no cancellation).
    """
    queries, keys = logits.shape[-2], logits.shape[-1]
    device = logits.device
    first = keys - queries if first is None else first
    before = torch.arange(keys, device=device) < torch.arange(first, first + queries, device=device)[:, None]
    log_rest = torch.where(before, F.logsigmoid(-logits), 0.0)  # [..., i, j]: log(1 − β_il) for l < i
    through = log_rest.flip(-1).cumsum(-1).flip(-1)  # [..., i, j]: Σ_{l ≥ j} log(1 − β_il)
    after = F.pad(through[..., 1:], (0, 1))  # [..., i, j]: Σ_{l > j}, i.e. Σ_{j<l<i}
    log_weights = torch.where(before, F.logsigmoid(logits) + after, float("-inf"))
    return log_weights, through[..., 0]


__all__ = ["stick_breaking_log_weights"]
