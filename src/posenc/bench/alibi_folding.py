"""A study beside ``posenc bench attention``, not timed: ALiBi folded into q·k as an extra channel.

Softmax drops −m·i, so ALiBi's −m·(i − j) is m·j, one more channel of q·k: q' = [q, √d], k' = [k, m·j].
At long sequences m·j is large and float32 loses q·k beside it; the block-centred form subtracts each
query block's last key, m·(j − e). Reported: each form's max |error| against the float64 oracle, and
the distance per head beyond which keys change an output by at most posenc's window tolerance.

Shapes: b batch, h heads, s sequence, d head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc.bench.oracle import attention_oracle
from posenc.encodings.bias import ALiBi
from posenc.kernels.per_distance import DEFAULT_BLOCK, decay_windows

FOLDED = "m·j as an extra q·k channel"
CENTRED = f"m·(j − block end) as an extra channel, per {DEFAULT_BLOCK}-query block"


def folded_alibi(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    """ALiBi as m·j in an extra channel of q·k, causal SDPA; q, k, v ``[b, h, s, d]`` -> ``[b, h, s, d]``."""
    b, h, s, d = q.shape
    extra = (slopes.double()[:, None] * torch.arange(s, dtype=torch.float64)).to(q.dtype)  # [h, s]
    q_ = torch.cat((q, q.new_full((b, h, s, 1), math.sqrt(d))), dim=-1)  # [b, h, s, d + 1]
    k_ = torch.cat((k, extra.expand(b, h, s)[..., None]), dim=-1)
    return F.scaled_dot_product_attention(q_, k_, v, is_causal=True, scale=1 / math.sqrt(d))


def block_centred_alibi(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, block: int = DEFAULT_BLOCK
) -> torch.Tensor:
    """:func:`folded_alibi` with the channel m·(j − e) per query block ending at e (keys 0 … e)."""
    b, h, s, d = q.shape
    q_ = torch.cat((q, q.new_full((b, h, s, 1), math.sqrt(d))), dim=-1)  # [b, h, s, d + 1]
    out = torch.empty_like(q)
    for start in range(0, s, block):
        end = min(start + block, s)  # keys 0 … end − 1
        j = torch.arange(end, dtype=torch.float64) - (end - 1)
        extra = (slopes.double()[:, None] * j).to(q.dtype)  # [h, end]
        k_ = torch.cat((k[:, :, :end], extra.expand(b, h, end)[..., None]), dim=-1)
        causal = torch.ones(end - start, end, dtype=torch.bool).tril(start)  # [rows, end]
        out[:, :, start:end] = F.scaled_dot_product_attention(
            q_[:, :, start:end], k_, v[:, :, :end], attn_mask=causal, scale=1 / math.sqrt(d)
        )
    return out


def study(seq_len: int, heads: int, d_head: int, batch: int = 1) -> dict:
    """Both folded forms' max |error| against float64, and ALiBi's windows per head, at ``seq_len`` (q, k, v
    N(0, 1) from a seed of ``seq_len``)."""
    generator = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(batch, heads, seq_len, d_head, generator=generator) for _ in range(3))
    alibi = ALiBi(heads).double()
    with torch.no_grad():
        expected = attention_oracle(alibi, q.double(), k.double(), v.double(), torch.arange(seq_len))
        slopes = alibi.slopes
        return {
            "seq_len": seq_len,
            "windows": decay_windows(q, k, v, slopes),
            FOLDED: float((folded_alibi(q, k, v, slopes).double() - expected).abs().max()),
            CENTRED: float((block_centred_alibi(q, k, v, slopes).double() - expected).abs().max()),
        }
