"""Float64 loops of stick-breaking attention written from the paper (Tan et al., 2025,
https://arxiv.org/abs/2410.17980, §2): the stick broken key by key from the query back, as products."""

from __future__ import annotations

import math


def _dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def stick_weights(query, keys, i: int) -> tuple[list, float]:
    """(A_ij for j < i, rem_i) for one query at key index i: A_ij = β_ij·Π_{j<l<i}(1 − β_il),
    β_ij = σ(q·k_j/√d), rem_i = Π_{l<i}(1 − β_il)."""
    scale = 1 / math.sqrt(len(query))
    beta = [_sigmoid(_dot(query, keys[j]) * scale) for j in range(i)]
    weights = []
    for j in range(i):
        rest = 1.0
        for m in range(j + 1, i):
            rest *= 1 - beta[m]
        weights.append(beta[j] * rest)
    left = 1.0
    for m in range(i):
        left *= 1 - beta[m]
    return weights, left


def stick_breaking_loop(q, k, v, *, remainder: str = "drop") -> list:
    """out[b][h][i] = Σ_{j<i} A_ij·v_j (+ rem_i·v_i with ``remainder="self"``) for q [b][h][i][d] and
    k, v [b][h][j][d] (as many key heads as query heads); the queries are the last i of the keys."""
    out = []
    for qb, kb, vb in zip(q, k, v, strict=True):
        heads = []
        for queries, keys, values in zip(qb, kb, vb, strict=True):
            offset = len(keys) - len(queries)
            rows = []
            for r, query in enumerate(queries):
                i = offset + r
                weights, left = stick_weights(query, keys, i)
                row = [sum(w * values[j][c] for j, w in enumerate(weights)) for c in range(len(values[0]))]
                if remainder == "self":
                    row = [x + left * values[i][c] for c, x in enumerate(row)]
                rows.append(row)
            heads.append(rows)
        out.append(heads)
    return out
