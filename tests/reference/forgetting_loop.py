"""Float64 loops of the Forgetting Transformer written from the paper (Lin et al., 2025,
https://arxiv.org/abs/2503.02130, eq. (4)-(5)): one gate, one score and one weight at a time."""

from __future__ import annotations

import math


def _dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _log_sigmoid(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))


def log_forget_gates(x, weight, bias) -> list:
    """log f[b][t][h] = log σ(w_h·x_t + b_h) for x [b][s][d], weight [h][d], bias [h]."""
    return [[[_log_sigmoid(_dot(w, token) + c) for w, c in zip(weight, bias, strict=True)] for token in row] for row in x]


def forget_bias_loop(log_f, queries: int) -> list:
    """D[b][h][i][j] = Σ_{l=j+1}^{i} log f_l for the keys j up to each query, None after it; the queries
    are the last ``queries`` of the tokens of log_f [b][t][h]."""
    out = []
    for row in log_f:
        keys, heads = len(row), len(row[0])
        offset = keys - queries
        out.append(
            [
                [
                    [sum(row[m][h] for m in range(j + 1, i + 1)) if j <= i else None for j in range(keys)]
                    for i in range(offset, keys)
                ]
                for h in range(heads)
            ]
        )
    return out


def fox_attention_loop(q, k, v, log_f) -> list:
    """out[b][h][i] = Σ_{j≤i} softmax_j(q_i·k_j/√d + D_ij)·v_j, with q [b][h][i][d], k, v [b][h][j][d]
    (as many key heads as query heads) and the keys' log gates [b][j][h]."""
    bias = forget_bias_loop(log_f, len(q[0][0]))
    out = []
    for qb, kb, vb, db in zip(q, k, v, bias, strict=True):
        heads = []
        for queries, keys, values, d in zip(qb, kb, vb, db, strict=True):
            scale = 1 / math.sqrt(len(queries[0]))
            rows = []
            for i, query in enumerate(queries):
                scores = [_dot(query, key) * scale + d[i][j] for j, key in enumerate(keys) if d[i][j] is not None]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                rows.append([sum(w * values[j][c] for j, w in enumerate(weights)) / total for c in range(len(values[0]))])
            heads.append(rows)
        out.append(heads)
    return out
