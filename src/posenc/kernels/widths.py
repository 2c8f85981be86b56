"""SDPA with one head width for q, k and v on CPU: its flash kernel takes one width, and given two (PoPE's
q and k of 2d against v of d) it runs its math backend, which holds every pair's weight."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def one_width_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` ``[b, h, i, d_v]`` with one head width for q, k and v on CPU.

    SDPA's CPU flash kernel takes one width; given q and k wider than v (PoPE's 2d against d) it runs its
    math backend, which holds the ``[b, h, i, j]`` weights (3.2x slower at s = 2048, memory growing with
    s²). v is padded with zeros to q's width (or q and k to v's: zeros add nothing to q·k) and the
    output's extra columns dropped; ``scale`` must be given, since SDPA's default reads q's width."""
    d_qk, d_v = q.shape[-1], v.shape[-1]
    if d_qk == d_v or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    if d_qk < d_v:
        q, k = F.pad(q, (0, d_v - d_qk)), F.pad(k, (0, d_v - d_qk))
    else:
        v = F.pad(v, (0, d_qk - d_v))
    return F.scaled_dot_product_attention(q, k, v, **kwargs)[..., :d_v]


__all__ = ["one_width_sdpa"]
