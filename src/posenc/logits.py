"""What a layer does to its attention logits besides the encoding: Gemma's query pre-attention scalar and
logit soft-capping.

- ``query_pre_attn_scalar`` (Gemma 2, arXiv 2408.00118; Gemma 3): the logits are q·kᵀ·n^(−½) for a
  declared n instead of q·kᵀ·d_head^(−½). Gemma multiplies the queries by n^(−½) before the product;
  posenc multiplies them by √(d_head / n) (:func:`query_factor`) before the encoding's own
  ``logit_scale(d_head)``, so every backend and every term that reads the query (Shaw's, PaTH's,
  stick-breaking's) sees the same query, and a scale the encoding changes (DeepSeek's YaRN) still holds.
- ``softcap`` (Gemma 2's ``attn_logit_softcapping``; Grok-1): logits z ← c·tanh(z / c), so none passes
  ±c. It caps what the softmax reads before the mask, q·kᵀ·scale + bias + terms, as transformers'
  Gemma 2 caps q·kᵀ·scale before its additive mask. SDPA's kernels never expose the logits, so a
  capped layer runs on ``eager`` or ``flex`` (:func:`capped_score_mod`) and refuses ``sdpa``.
"""

from __future__ import annotations

import math

import torch

from posenc._validation import check_positive_float


def check_query_pre_attn_scalar(value: object) -> float | None:
    """None, or a finite number > 0 as a float.

    Raises:
        TypeError: a value that is not a real number.
        ValueError: one that is not finite and > 0.
    """
    return None if value is None else check_positive_float("query_pre_attn_scalar", value)


def check_softcap(value: object) -> float | None:
    """None, or a finite cap > 0 as a float.

    Raises:
        TypeError: a value that is not a real number.
        ValueError: one that is not finite and > 0.
    """
    return None if value is None else check_positive_float("softcap", value)


def check_softcap_backend(softcap: float | None, backend: str) -> None:
    """Refuse a capped layer on ``sdpa``, whose kernels never expose the logits.

    Raises:
        ValueError: naming the cap and the backend.
    """
    if softcap is not None and backend == "sdpa":
        raise ValueError(
            f"softcap={softcap} caps the logits, which backend='sdpa' never holds (its kernels fuse the "
            "softmax): use backend='eager' or 'flex'"
        )


def query_factor(d_head: int, query_pre_attn_scalar: float) -> float:
    """√(d_head / n): queries times it give q·kᵀ·n^(−½) where attention scales by d_head^(−½)."""
    return math.sqrt(d_head / query_pre_attn_scalar)


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """c·tanh(z / c), elementwise, in the scores' dtype."""
    return torch.tanh(scores / cap) * cap


def capped_score_mod(score_mod, cap: float):
    """A flex ``score_mod`` giving c·tanh(z / c) of what ``score_mod`` (or nothing) gives."""

    def capped(score, b, h, q_idx, kv_idx):
        score = score if score_mod is None else score_mod(score, b, h, q_idx, kv_idx)
        return torch.tanh(score / cap) * cap

    return capped
