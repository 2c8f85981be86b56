"""Float64 loop implementation of DeBERTa's disentangled attention, written from the paper's formulas.

He et al., 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention",
https://arxiv.org/abs/2006.03654, §3.1 (Eq. 4 and Algorithm 1): for query i and key j

    Ã_ij = Q^c_i·K^c_jᵀ + Q^c_i·K^r_δ(i,j)ᵀ + K^c_j·Q^r_δᵀ,    H = softmax(Ã / √(3d))·V^c

with δ(i, j) = 0 for i − j ≤ −k, 2k − 1 for i − j ≥ k, i − j + k otherwise, and K^r = P·W_k,r,
Q^r = P·W_q,r for the relative embeddings P [2k, d_model]. The row of the p2c term: Algorithm 1 writes
δ(j, i); DeBERTa's code (and every released checkpoint) reads δ(i, j), as c2p does. ``p2c_row`` picks
one; the default is the code's. DeBERTa-v2's log buckets replace i − j by its bucket (the v2 release,
``make_log_bucket_position``), with k = position_buckets; LayerNorm on P is v2's ``norm_rel_ebd``.

Everything is plain Python floats (math.log, math.exp, sums of products), one pair at a time.
"""

from __future__ import annotations

import math


def log_bucket(relative: int, position_buckets: int, max_relative_positions: int) -> int:
    """DeBERTa-v2's bucket of one relative position: exact up to m = position_buckets // 2, then
    sign·(m + ⌈ln(|r|/m) / ln((M − 1)/m)·(m − 1)⌉), in float64.

    Where the logarithms' ratio is an integer (|r|/m a whole power of (M − 1)/m, e.g. r = M − 1), float64
    may land a rounding above it and ⌈·⌉ would add one: a value within 1e-9 of an integer is taken as it.
    """
    m = position_buckets // 2
    if abs(relative) <= m:
        return relative
    scaled = math.log(abs(relative) / m) / math.log((max_relative_positions - 1) / m) * (m - 1)
    nearest = round(scaled)
    steps = nearest if abs(scaled - nearest) < 1e-9 * max(1.0, abs(scaled)) else math.ceil(scaled)
    return int(math.copysign(m + steps, relative))


def delta(p_i: int, p_j: int, span: int, position_buckets: int | None, max_relative_positions: int) -> int:
    """δ(i, j): the row of P read for query position p_i and key position p_j (the paper's clipped
    i − j + k, with i − j bucketed when position_buckets is given)."""
    relative = p_i - p_j
    if position_buckets is not None:
        relative = log_bucket(relative, position_buckets, max_relative_positions)
    if relative <= -span:
        return 0
    if relative >= span:
        return 2 * span - 1
    return relative + span


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _linear(x: list[float], weight: list[list[float]], bias: list[float] | None) -> list[float]:
    """weight [out, in] applied to x [in], plus bias [out]."""
    return [_dot(row, x) + (0.0 if bias is None else bias[o]) for o, row in enumerate(weight)]


def _layer_norm(x: list[float], gamma: list[float], beta: list[float], eps: float) -> list[float]:
    mean = sum(x) / len(x)
    variance = sum((v - mean) ** 2 for v in x) / len(x)
    return [(v - mean) / math.sqrt(variance + eps) * g + b for v, g, b in zip(x, gamma, beta, strict=True)]


def _head(vector: list[float], head: int, d_head: int) -> list[float]:
    return vector[head * d_head : (head + 1) * d_head]


def disentangled_attention(
    x: list[list[float]],
    positions: list[int],
    weights: dict,
    *,
    n_heads: int,
    position_buckets: int | None,
    max_relative_positions: int,
    terms: tuple[str, ...] = ("c2p", "p2c"),
    causal: bool = False,
    p2c_row: str = "code",
) -> list[list[list[float]]]:
    """The attention output per head, ``out[h][i]`` (d_head floats), of one sequence x [s][d_model].

    ``weights``: "q", "k", "v" (weight [d, d], bias [d] or None) for the content projections; "rel"
    ([2k][d_model]) the relative embeddings; "norm" ((γ, β, eps) or None); "pos_key" and "pos_query"
    ((weight, bias)) the relative projections (for a shared key: the content ones).
    """
    d_model = len(x[0])
    d_head = d_model // n_heads
    span = position_buckets if position_buckets is not None else max_relative_positions
    factor = 1 + len(terms)
    rel = weights["rel"]
    if weights.get("norm") is not None:
        gamma, beta, eps = weights["norm"]
        rel = [_layer_norm(row, gamma, beta, eps) for row in rel]
    q = [_linear(t, *weights["q"]) for t in x]
    k = [_linear(t, *weights["k"]) for t in x]
    v = [_linear(t, *weights["v"]) for t in x]
    k_r = [_linear(row, *weights["pos_key"]) for row in rel] if "c2p" in terms else None
    q_r = [_linear(row, *weights["pos_query"]) for row in rel] if "p2c" in terms else None
    out = []
    for h in range(n_heads):
        rows = []
        for i, p_i in enumerate(positions):
            scores = []
            for j, p_j in enumerate(positions):
                if causal and j > i:
                    scores.append(-math.inf)
                    continue
                q_i, k_j = _head(q[i], h, d_head), _head(k[j], h, d_head)
                score = _dot(q_i, k_j)
                if "c2p" in terms:
                    score += _dot(
                        q_i,
                        _head(
                            k_r[delta(p_i, p_j, span, position_buckets, max_relative_positions)], h, d_head
                        ),
                    )
                if "p2c" in terms:
                    row = (
                        delta(p_i, p_j, span, position_buckets, max_relative_positions)
                        if p2c_row == "code"
                        else delta(p_j, p_i, span, position_buckets, max_relative_positions)
                    )
                    score += _dot(k_j, _head(q_r[row], h, d_head))
                scores.append(score / math.sqrt(d_head * factor))
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            total = sum(exps)
            rows.append(
                [
                    sum(e / total * _head(v[j], h, d_head)[c] for j, e in enumerate(exps))
                    for c in range(d_head)
                ]
            )
        out.append(rows)
    return out
