"""Float64 loops of CoPE written from the paper (Golovneva et al., 2024,
https://arxiv.org/abs/2405.18719, §3): one query, one key and one scalar at a time, with the interpolated embedding built as a vector."""

from __future__ import annotations

import math


def _dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def counted_position(query, keys, j: int, i: int, npos_max: int) -> float:
    """p_ij = min(Σ_{t=j}^{i} σ(q_i·k_t/√d), npos_max − 1) for one query vector and the key vectors."""
    scale = math.sqrt(len(query))
    total = sum(_sigmoid(_dot(query, keys[t]) / scale) for t in range(j, i + 1))
    return min(total, npos_max - 1)


def interpolated_embedding(table, p: float) -> list[float]:
    """e(p) = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋], as a vector of the head width."""
    low, high = math.floor(p), math.ceil(p)
    return [(p - low) * up + (1 - p + low) * down for up, down in zip(table[high], table[low], strict=True)]


def cope_term(query, keys, table, j: int, i: int) -> float:
    """q_i·e(p_ij) for the key j ≤ i."""
    return _dot(query, interpolated_embedding(table, counted_position(query, keys, j, i, len(table))))


def cope_terms_loop(q, k, table) -> list:
    """terms[b][h][i][j] = q_i·e(p_ij) for the keys j a causal query sees, None for the others.

    q: nested lists [b][h][i][d]; k: [b][h_kv][j][d] (key heads shared by h / h_kv query heads each); the
    queries are the last i of the j keys; table: [npos_max][d].
    """
    terms = []
    for qb, kb in zip(q, k, strict=True):
        groups = len(qb) // len(kb)
        rows = []
        for head, queries in enumerate(qb):
            keys = kb[head // groups]
            offset = len(keys) - len(queries)
            rows.append(
                [
                    [
                        cope_term(query, keys, table, j, i + offset) if j <= i + offset else None
                        for j in range(len(keys))
                    ]
                    for i, query in enumerate(queries)
                ]
            )
        terms.append(rows)
    return terms


def cope_attention_loop(q, k, v, table) -> list:
    """out[b][h][i] = Σ_j softmax_j(q_i·k_j/√d + q_i·e(p_ij))·v_j over the keys j ≤ i (causal)."""
    terms = cope_terms_loop(q, k, table)
    out = []
    for b, (qb, kb, vb) in enumerate(zip(q, k, v, strict=True)):
        groups = len(qb) // len(kb)
        heads = []
        for head, queries in enumerate(qb):
            keys, values = kb[head // groups], vb[head // groups]
            offset = len(keys) - len(queries)
            rows = []
            for i, query in enumerate(queries):
                seen = range(i + offset + 1)
                logits = [_dot(query, keys[j]) / math.sqrt(len(query)) + terms[b][head][i][j] for j in seen]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights)
                rows.append(
                    [sum(weights[j] * values[j][c] for j in seen) / total for c in range(len(values[0]))]
                )
            heads.append(rows)
        out.append(heads)
    return out
