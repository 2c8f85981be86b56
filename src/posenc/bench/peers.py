"""posenc's declared extra rows of ``posenc bench attention``: what libraries do, functional kernels and
naive forms that hold ``[b, h, i, j, d]``, each beside the encoding it is a form of.

Each computes, from the layer's own weights, what ``MultiHeadAttention`` computes with that encoding (causal,
scale the encoding's ``logit_scale``), so it is checked against the encoding's float64 oracle. Shapes: b
batch, h heads, s sequence, i / j query / key positions, d head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc.bench.extras import NAIVE_LIMIT_BYTES, Extra, causal_softmax, extra, heads_of, merged
from posenc.functional.alibi import alibi_attention

LIMIT = f"not run where that tensor exceeds {NAIVE_LIMIT_BYTES >> 30} GiB"


def _materialised(layer, positions: torch.Tensor):
    encoding = layer.encoding

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        bias = encoding.bias(positions, positions)  # [h, s, s]
        causal = torch.ones(bias.shape[-2:], dtype=torch.bool, device=x.device).tril()
        mask = bias.to(q.dtype).masked_fill(~causal, float("-inf"))
        scale = encoding.logit_scale(layer.d_head)
        return merged(layer, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))

    return run


extra(
    Extra(
        "SDPA + {encoding} bias (materialised)",
        compares_with="the encoding's sdpa row, which reads a bias of the distance alone per distance",
        what="the encoding's [h, s, s] bias plus the causal −inf mask as a float attn_mask to SDPA",
        make=_materialised,
        applies=lambda encoding: "distance_bias" in encoding.views,
    )
)


def _alibi_function(window: bool):
    def make(layer, positions: torch.Tensor):
        slopes = layer.encoding.slopes
        tolerance = {} if window else {"window_tolerance": None}

        def run(x: torch.Tensor) -> torch.Tensor:
            q, k, v = heads_of(layer, x)
            return merged(layer, alibi_attention(q, k, v, slopes, **tolerance))

        return run

    return make


extra(
    Extra(
        "posenc alibi_attention",
        compares_with="alibi's rows",
        what="posenc.functional.alibi_attention: the bias as a strided view, query blocks, per-head windows",
        make=_alibi_function(window=True),
        encoding="alibi",
    )
)
extra(
    Extra(
        "posenc alibi_attention, no window",
        compares_with="alibi's rows and alibi_attention with its windows",
        what="the same reading every key (window_tolerance=None)",
        make=_alibi_function(window=False),
        encoding="alibi",
    )
)


def _naive_deberta(layer, positions: torch.Tensor):
    encoding = layer.encoding

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        pos_query, pos_key = encoding.position_heads(layer.project_heads)  # [h, 2S, d] each
        index = encoding.relative_index(positions, positions)  # [i, j]
        c2p = (q.unsqueeze(3) * pos_key[:, index]).sum(-1)  # [b, h, i, j, d] -> [b, h, i, j]
        p2c = (k.unsqueeze(2) * pos_query[:, index]).sum(-1)  # k_j·Q_r[δ(i, j)]
        scores = (q @ k.transpose(-1, -2) + c2p + p2c) / math.sqrt(q.shape[-1] * encoding.scale_factor)
        return merged(layer, causal_softmax(scores, v))

    return run


extra(
    Extra(
        "DeBERTa naive: [b, h, i, j, d] gathered",
        compares_with="deberta's rows (q·K_rᵀ and k·Q_rᵀ per relative embedding, then a gather)",
        what=f"K_r and Q_r gathered for every pair, times q and k, summed, then softmax; {LIMIT}",
        make=_naive_deberta,
        encoding="deberta",
        pairs=True,
    )
)


def _naive_shaw(layer, positions: torch.Tensor):
    encoding = layer.encoding

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        pairs = encoding.key_table[encoding.rows(positions, positions)].to(q.dtype)  # [i, j, d]
        relative = (q.unsqueeze(3) * pairs).sum(-1)  # [b, h, i, j, d] -> [b, h, i, j]
        return merged(layer, causal_softmax((q @ k.transpose(-1, -2) + relative) / math.sqrt(q.shape[-1]), v))

    return run


extra(
    Extra(
        "Shaw naive: [b, h, i, j, d] gathered",
        compares_with="shaw's rows (q·w^Kᵀ per table row, then a gather)",
        what=f"w^K gathered for every pair [i, j, d], times q as [b, h, i, j, d], summed, then softmax; {LIMIT}",
        make=_naive_shaw,
        encoding="shaw",
        pairs=True,
    )
)


def _naive_transformer_xl(layer, positions: torch.Tensor):
    encoding = layer.encoding

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        s = positions.shape[0]
        per_distance = encoding.projected(torch.arange(s - 1, -s, -1), q.dtype)  # [h, d, 2s − 1]
        column = (s - 1) - (positions[:, None] - positions[None, :])  # [i, j]
        pairs = per_distance.transpose(-1, -2)[:, column]  # [h, i, j, d]
        query = q + encoding.v.to(q.dtype).unsqueeze(-2)  # q_i + v: [b, h, i, d]
        relative = (query.unsqueeze(3) * pairs).sum(-1) + encoding.key_bias_term(
            k, q.shape[1]
        )  # [b, h, i, j]
        return merged(layer, causal_softmax((q @ k.transpose(-1, -2) + relative) / math.sqrt(q.shape[-1]), v))

    return run


extra(
    Extra(
        "Transformer-XL naive: [b, h, i, j, d] gathered",
        compares_with="transformer_xl's rows ((q + v)·W_{k,R}R per distance, then the rel-shift view)",
        what=f"W_{{k,R}}R_{{i−j}} gathered for every pair, times q + v as [b, h, i, j, d], + u·k_j; {LIMIT}",
        make=_naive_transformer_xl,
        encoding="transformer_xl",
        pairs=True,
    )
)


def _naive_cope(layer, positions: torch.Tensor):
    encoding = layer.encoding

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        table = encoding.table.to(q.dtype)  # [npos, d]
        counts = encoding.counted_positions(q, k)  # [b, h, i, j]
        floor = counts.floor()
        upper = (floor + 1).clamp(max=table.shape[0] - 1).long()
        weight = (counts - floor).unsqueeze(-1)  # [b, h, i, j, 1]
        embedded = table[floor.long()] * (1 - weight) + table[upper] * weight  # [b, h, i, j, d]
        relative = (q.unsqueeze(3) * embedded).sum(-1)  # [b, h, i, j]
        return merged(layer, causal_softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + relative, v))

    return run


extra(
    Extra(
        "CoPE naive: [b, h, i, j, d] interpolated",
        compares_with="cope's rows (q·e per table row, interpolated by two gathers)",
        what=f"the same counts, the embedding interpolated for every pair and multiplied by q; {LIMIT}",
        make=_naive_cope,
        encoding="cope",
        pairs=True,
    )
)
