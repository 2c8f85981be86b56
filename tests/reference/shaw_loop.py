"""Float64 loops of Shaw et al.'s relative attention and of BERT's two variants, from the formulas.

Shaw, Uszkoreit & Vaswani 2018 (https://arxiv.org/abs/1803.02155), eq. (3)–(5):
    e_ij = q_i·(k_j + a^K_ij) / √d,   α = softmax_j(e),   z_i = Σ_j α_ij (v_j + a^V_ij),
    a_ij = w_clip(j − i, k),  clip(x, k) = max(−k, min(k, x)),  row of w: clip(j − i, k) + k.
transformers 4.x BertSelfAttention, position_embedding_type "relative_key" / "relative_key_query":
    e_ij = (q_i·k_j + q_i·E[i − j + L − 1] [+ k_j·E[i − j + L − 1]]) / √d.

Every sum is a Python loop over plain floats; a key is masked when causal and its index passes the
query's (the queries are the last of the keys' sequence).
"""

from __future__ import annotations

import math

import torch


def _dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _positions(positions: torch.Tensor, batch: int) -> list[list[int]]:
    rows = positions.tolist()
    return rows if positions.dim() == 2 else [rows] * batch


def relative_attention_loop(q, k, v, q_positions, k_positions, *, logit, value_offset=None, causal=False):
    """softmax_j(q_i·k_j/√d + logit(...))·(v_j + value_offset(...)), float64 ``[b, h, i, d]``.

    ``logit(q_vec, k_vec, q_pos, k_pos, head)`` is the scheme's extra logit (already divided by √d);
    ``value_offset(q_pos, k_pos) -> list`` its relative value, or None. k and v may have fewer heads
    (grouped queries: query head n reads key head n // (h / h_kv)).
    """
    b, h, n_q, d = q.shape
    n_k, groups = k.shape[2], h // k.shape[1]
    qs, ks, vs = q.tolist(), k.tolist(), v.tolist()
    qp, kp = _positions(q_positions, b), _positions(k_positions, b)
    out = torch.zeros(b, h, n_q, d, dtype=torch.float64)
    for batch in range(b):
        for head in range(h):
            kv = head // groups
            for i in range(n_q):
                keys = [j for j in range(n_k) if not causal or j <= i + n_k - n_q]
                scores = [
                    _dot(qs[batch][head][i], ks[batch][kv][j]) / math.sqrt(d)
                    + logit(qs[batch][head][i], ks[batch][kv][j], qp[batch][i], kp[batch][j], head)
                    for j in keys
                ]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = math.fsum(weights)
                values = [
                    [
                        vs[batch][kv][j][c]
                        + (0.0 if value_offset is None else value_offset(qp[batch][i], kp[batch][j])[c])
                        for c in range(d)
                    ]
                    for j in keys
                ]  # v_j + a^V_ij
                for c in range(d):
                    out[batch, head, i, c] = (
                        math.fsum(w * row[c] for w, row in zip(weights, values, strict=True)) / total
                    )
    return out


def shaw_attention_loop(
    q, k, v, q_positions, k_positions, key_table, value_table=None, *, max_distance, causal=False
):
    """Shaw et al.: a^K_ij = w^K[clip(j − i, k) + k] in the logit, a^V_ij = w^V[…] added to the values."""
    w_k = key_table.tolist()
    w_v = None if value_table is None else value_table.tolist()
    d = q.shape[-1]

    def row(q_pos: int, k_pos: int) -> int:
        return max(-max_distance, min(max_distance, k_pos - q_pos)) + max_distance

    def logit(q_vec, k_vec, q_pos, k_pos, head):
        return _dot(q_vec, w_k[row(q_pos, k_pos)]) / math.sqrt(d)

    def value_offset(q_pos, k_pos):
        return w_v[row(q_pos, k_pos)]

    return relative_attention_loop(
        q, k, v, q_positions, k_positions, logit=logit,
        value_offset=None if w_v is None else value_offset, causal=causal,
    )  # fmt: skip


def bert_relative_attention_loop(
    q, k, v, q_positions, k_positions, table, *, max_len, key_query, causal=False
):
    """BERT's relative_key (q·E) and relative_key_query (q·E + k·E), E = table[i − j + L − 1]."""
    e = table.tolist()
    d = q.shape[-1]

    def logit(q_vec, k_vec, q_pos, k_pos, head):
        row = e[q_pos - k_pos + max_len - 1]
        return (_dot(q_vec, row) + (_dot(k_vec, row) if key_query else 0.0)) / math.sqrt(d)

    return relative_attention_loop(q, k, v, q_positions, k_positions, logit=logit, causal=causal)
