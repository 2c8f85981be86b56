"""Float64 loops of PaTH written from the paper (Yang et al., 2025, https://arxiv.org/abs/2505.16381, §3):
each Householder matrix built, the product from key to query multiplied out, one logit at a time."""

from __future__ import annotations

import math


def _matmul(a, b) -> list:
    return [[sum(a[r][t] * b[t][c] for t in range(len(b))) for c in range(len(b[0]))] for r in range(len(a))]


def householder(w, beta: float) -> list:
    """H = I − β·w·wᵀ as a d × d list of rows."""
    d = len(w)
    return [[(1.0 if r == c else 0.0) - beta * w[r] * w[c] for c in range(d)] for r in range(d)]


def path_logit(query, key, ws, betas, j: int, i: int) -> float:
    """k_jᵀ(Π_{t=j+1}^{i} H_t)q_i: the product H_(j+1)·H_(j+2) ⋯ H_i applied to q_i, dotted with k_j."""
    d = len(query)
    product = [[1.0 if r == c else 0.0 for c in range(d)] for r in range(d)]
    for t in range(j + 1, i + 1):
        product = _matmul(product, householder(ws[t], betas[t]))
    carried = [sum(product[r][c] * query[c] for c in range(d)) for r in range(d)]
    return sum(k * x for k, x in zip(key, carried, strict=True))


def path_attention_loop(q, k, v, w, beta) -> list:
    """out[b][h][i] = Σ_{j≤i} softmax_j(path_logit/√d)·v_j for q [b][h][i][d], k, v, w [b][h][j][d] and
    beta [b][h][j] (as many key heads as query heads); the queries are the last i of the keys."""
    out = []
    for qb, kb, vb, wb, bb in zip(q, k, v, w, beta, strict=True):
        heads = []
        for queries, keys, values, ws, betas in zip(qb, kb, vb, wb, bb, strict=True):
            offset = len(keys) - len(queries)
            scale = 1 / math.sqrt(len(queries[0]))
            rows = []
            for r, query in enumerate(queries):
                i = offset + r
                scores = [path_logit(query, keys[j], ws, betas, j, i) * scale for j in range(i + 1)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                rows.append([sum(wt * values[j][c] for j, wt in enumerate(weights)) / total for c in range(len(values[0]))])
            heads.append(rows)
        out.append(heads)
    return out
