"""PaTH's logits: q_i·(H_i ⋯ H_{j+1})·k_j, the key carried to the query through data-dependent Householders.

Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, 2025, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", https://arxiv.org/abs/2505.16381 (NeurIPS 2025): with
H_t = I − β_t·w_t·w_tᵀ (‖w_t‖ = 1, β_t ∈ (0, 2)) read from token t, the logit of query i and key j ≤ i is
k_jᵀ(Π_{t=j+1}^{i} H_t)q_i = q_iᵀ(H_i ⋯ H_{j+1})k_j (each H symmetric). Two forms, the same numbers:

- :func:`path_scores_eager` carries every key to every query, one token at a time: it holds the keys as
  seen from each query, ``[b, h, i, j, d]``, O(s²·d);
- :func:`path_scores_chunked` uses the compact (UT) form of a product of Householders (the paper's §3.2):
  over a block of C tokens, H_a ⋯ H_e = I − W·T·Wᵀ with T upper triangular, T = (I + diag(β)·striu(W·Wᵀ))⁻¹
  ·diag(β), whose diagonal blocks are the T of the sub-ranges. Within a block the logits are
  Q·Kᵀ − (Q·Wᵀ)⊙mask·Tᵀ·(W·Kᵀ)⊙mask; across blocks each query is carried to its block's start and each
  key to its block's end, and the queries then cross one whole block per step (I − W·T·Wᵀ). Besides the
  logits ``[b, h, i, j]`` themselves, each step holds O(s·(d + C)) numbers: the queries carried so far
  ``[b, h, i, d]`` and one band of logits ``[b, h, i, C]`` (autograd keeps each step's, O(s²·(d + C)/C)
  in all, never the O(s²·d) of the eager form).

Notation used for tensor shapes: b batch, h heads, i / j query / key positions (the queries are the last i
of the j keys), d head width, n blocks, C tokens per block.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def path_scores_eager(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """q_rᵀ(H_i ⋯ H_{j+1})k_j ``[b, h, i, j]`` for the keys j ≤ i (query r at key i = j_total − i_total + r),
    q_r·k_j after the query; q ``[b, h, i, d]``, k and w ``[b, h, j, d]``, beta ``[b, h, j]``.

    The keys are carried forward one token at a time (k_j ← H_t·k_j for every key j < t) and each query
    reads them as they stand at its own token: ``[b, h, i, j, d]`` held at once.
    """
    queries, keys = q.shape[2], k.shape[2]
    carried = k
    seen = []  # the keys as query r sees them, [b, h, j, d] each
    for t in range(keys):
        earlier = (torch.arange(keys, device=k.device) < t)[:, None]  # [j, 1]: the keys H_t acts on
        along = (carried * w[:, :, t, None]).sum(-1, keepdim=True)  # [b, h, j, 1]: w_t·k_j
        carried = torch.where(earlier, carried - beta[:, :, t, None, None] * along * w[:, :, t, None], carried)
        if t >= keys - queries:
            seen.append(carried)
    carried_keys = torch.stack(seen, dim=2)  # [b, h, i, j, d]
    return (q[:, :, :, None, :] * carried_keys).sum(-1)


def _compact(w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """T ``[..., C, C]`` of the UT form H_0 ⋯ H_{C−1} = I − Wᵀ·T·W, from w ``[..., C, d]`` and beta ``[..., C]``."""
    size = w.shape[-2]
    overlap = (w @ w.transpose(-1, -2)).triu(diagonal=1)  # [..., C, C]: w_a·w_e for a < e
    unit = torch.eye(size, dtype=w.dtype, device=w.device) + beta[..., :, None] * overlap
    return torch.linalg.solve_triangular(unit, torch.diag_embed(beta), upper=True)


def path_scores_chunked(
    q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, *, chunk: int = 64
) -> torch.Tensor:
    """:func:`path_scores_eager`'s logits ``[b, h, i, j]`` for the keys j ≤ i, in blocks of ``chunk`` tokens
    (see the module); the numbers for keys after the query are left unspecified (causal attention hides them).

    The blocks end at the last key (the sequence is padded at the front with tokens whose H is the
    identity); only the blocks holding queries are carried, so one query after a KV cache costs
    O(j/C) steps of O(C·(d + C)).
    """
    b, h, queries, d = q.shape
    keys = k.shape[2]
    blocks = math.ceil(keys / chunk)
    padding = blocks * chunk - keys
    k = F.pad(k, (0, 0, padding, 0)).unflatten(2, (blocks, chunk))  # [b, h, n, C, d]
    w = F.pad(w, (0, 0, padding, 0)).unflatten(2, (blocks, chunk))
    beta = F.pad(beta, (padding, 0)).unflatten(2, (blocks, chunk))  # [b, h, n, C]
    held = math.ceil(queries / chunk)  # the last blocks, which hold the queries
    q = F.pad(q, (0, 0, held * chunk - queries, 0)).unflatten(2, (held, chunk))  # [b, h, m, C, d]
    compact = _compact(w, beta)  # [b, h, n, C, C]
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()  # [r, a]: a ≤ r
    w_q, t_q = w[:, :, blocks - held :], compact[:, :, blocks - held :]  # the query blocks' own
    along_q = (q @ w_q.transpose(-1, -2)).masked_fill(~lower, 0.0)  # [b, h, m, C, C]: q_r·w_a, a ≤ r
    along_k = (w @ k.transpose(-1, -2)).masked_fill(lower.T, 0.0)  # [b, h, n, C, C]: w_e·k_c, e > c
    within = q @ k[:, :, blocks - held :].transpose(-1, -2) - along_q @ t_q.transpose(-1, -2) @ along_k[
        :, :, blocks - held :
    ]  # [b, h, m, C, C]: logits within each query block
    carried = q - along_q @ t_q.transpose(-1, -2) @ w_q  # [b, h, m, C, d]: each query at its block's start
    ends = k - along_k.transpose(-1, -2) @ compact @ w  # [b, h, n, C, d]: each key at its block's end
    bands = [within]  # bands[δ][m]: query block m against key block m − δ
    for step in range(1, blocks):
        first = max(0, held - (blocks - step))  # query blocks with a key block δ = step before them
        keys_at = torch.arange(blocks - held + first - step, blocks - step, device=q.device)  # [m']
        band = carried[:, :, first:] @ ends[:, :, keys_at].transpose(-1, -2)  # [b, h, m', C, C]
        bands.append(F.pad(band, (0, 0, 0, 0, first, 0)))
        if step < blocks - 1:  # carry the queries back across those key blocks: g ← (I − W·T·Wᵀ)·g
            w_at, t_at = w[:, :, keys_at], compact[:, :, keys_at]  # [b, h, m', C, d], [b, h, m', C, C]
            moved = carried[:, :, first:]
            moved = moved - (moved @ w_at.transpose(-1, -2)) @ t_at.transpose(-1, -2) @ w_at
            carried = torch.cat((carried[:, :, :first], moved), dim=2)
    scores = torch.stack(bands, dim=2)  # [b, h, δ, m, C, C]
    rows = torch.arange(held, device=q.device)[:, None]  # [m, 1]
    distance = (blocks - held + rows - torch.arange(blocks, device=q.device)).clamp(min=0)  # [m, n]: δ
    # key blocks after a query block (δ < 0) take band 0's numbers: keys after every query, masked
    scores = scores[:, :, distance, rows]  # [b, h, m, n, C, C]
    scores = scores.transpose(3, 4).reshape(b, h, held * chunk, blocks * chunk)  # [b, h, m·C, n·C]
    return scores[:, :, held * chunk - queries :, padding:]  # [b, h, i, j]


__all__ = ["path_scores_chunked", "path_scores_eager"]
