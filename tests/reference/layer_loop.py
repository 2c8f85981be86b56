"""Float64 loop attention of one head with a sliding window, chunks, a learned sink and a query temperature,
written from the definitions: Mistral/Gemma's sliding window (query t sees t − W < u ≤ t), Llama 4's
chunks (⌊t / C⌋ = ⌊u / C⌋), GPT-OSS's sink logit in the softmax's denominator, Llama 4's, Ministral 3's
and SSMax's query factors, Gemma 2's logit soft cap (c·tanh(z / c)), and the RMSNorm of a head
(x / √(mean(x²) + eps) · gain) that QK-norm applies to each query and key."""

from __future__ import annotations

import math


def llama4_factor(p: int, floor_scale: int, attn_scale: float) -> float:
    """Llama 4: log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1."""
    return math.log(math.floor((p + 1) / floor_scale) + 1) * attn_scale + 1


def ministral3_factor(p: int, beta: float, original: int) -> float:
    """Ministral 3: 1 + β · log(1 + ⌊p / original_max_position_embeddings⌋)."""
    return 1 + beta * math.log(1 + math.floor(p / original))


def ssmax_factor(p: int, s: float) -> float:
    """SSMax (arXiv 2501.19399): s · log n, n = p + 1 keys seen by a causal query at position p."""
    return s * math.log(p + 1)


def rms_norm(x: list[float], gain: list[float] | None, eps: float) -> list[float]:
    """x / √(mean(x²) + eps), times gain[c] for each channel c where a gain is given."""
    rms = math.sqrt(sum(a * a for a in x) / len(x) + eps)
    return [a / rms * (1.0 if gain is None else g) for a, g in zip(x, gain or [1.0] * len(x), strict=True)]


def sees(t: int, u: int, *, causal: bool, window: int | None, chunk: int | None) -> bool:
    if causal and u > t:
        return False
    if window is not None and (t - u >= window if causal else abs(t - u) >= window):
        return False
    return chunk is None or t // chunk == u // chunk


def attend(
    q,
    k,
    v,
    *,
    scale,
    causal=True,
    window=None,
    chunk=None,
    sink=None,
    factors=None,
    documents=None,
    softcap=None,
):
    """One head: q [i][d], k, v [j][d] (lists of float lists), queries the last i of the keys' tokens;
    sink: a logit or None; factors: one per query or None; documents: one id per token (i = j); softcap:
    c, the logits c·tanh(z / c), or None."""
    i, j = len(q), len(k)
    out = []
    for r in range(i):
        t = j - i + r
        f = 1.0 if factors is None else factors[r]
        logits = []
        for u in range(j):
            seen = sees(t, u, causal=causal, window=window, chunk=chunk)
            if documents is not None and documents[t] != documents[u]:
                seen = False
            if seen:
                z = sum(f * a * b for a, b in zip(q[r], k[u], strict=True)) * scale
                logits.append((u, z if softcap is None else softcap * math.tanh(z / softcap)))
        terms = [z for _, z in logits] + ([] if sink is None else [sink])
        top = max(terms)
        total = sum(math.exp(z - top) for z in terms)
        row = [0.0] * len(v[0])
        for u, z in logits:
            w = math.exp(z - top) / total
            row = [acc + w * x for acc, x in zip(row, v[u], strict=True)]
        out.append(row)
    return out
