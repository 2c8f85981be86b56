"""The float64 oracle every row of ``posenc bench attention`` is checked against, written once for every
encoding: the encoding's own hooks (``rotate``, ``logit_scale``, ``bias``, ``score_terms``, ``content``
and ``content_terms``, ``value_terms``, ``output_terms``) in float64, and the softmax one query at a time.

Shapes: b batch, h heads, s sequence, i / j query / key positions, d head width.
"""

from __future__ import annotations

import copy

import torch


def attention_oracle(
    encoding,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    *,
    project=None,
    causal: bool = True,
    content: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + bias + terms + causal mask)·v (+ value terms), query by query, in float64.

    Args:
        encoding: a float64 ``PositionalEncoding`` (its hooks give the scale, bias and terms).
        q, k, v: ``[b, h, s, d]`` float64 (q and k unrotated; the encoding rotates them).
        positions: the queries' and keys' positions, ``[s]`` (``[s, n]`` on n axes).
        project: the layer's ``project_heads`` for ``score_terms`` (DeBERTa's shared key), or None.
        causal: mask the keys after each query.
        content: what the encoding read of each token's layer input, ``[b, s, c]`` (``content``), or None.

    Returns:
        ``[b, h, s, d]`` float64.
    """
    if q.dtype != torch.float64:
        raise ValueError(f"the oracle takes float64 q, k, v, got {q.dtype}")
    scale = encoding.logit_scale(
        q.shape[-1]
    )  # of the heads' width, as attention reads it (before PoPE widens q)
    q, k = encoding.rotate(q, k, positions, positions)
    s = q.shape[2]
    bias = encoding.bias(positions, positions)  # [(b,) h, i, j] or None
    terms = encoding.score_terms(q, k, positions, positions, project=project)  # [b, h, i, j] or None
    read = None if content is None else encoding.content_terms(q, k, content, content)  # [b, h, i, j] or None
    weights = q.new_zeros(*q.shape[:3], s) if encoding.capabilities.reads_attention_weights else None  # [b, h, i, j]
    out = q.new_empty(*q.shape[:3], v.shape[-1])  # [b, h, i, d_v]: q and k may be wider (PoPE)
    for i in range(s):
        scores = (q[:, :, i : i + 1] @ k.transpose(-1, -2)) * scale  # [b, h, 1, j]
        for added in (bias, terms, read):
            if added is not None:
                scores = scores + added[..., i : i + 1, :].double()
        if causal:
            scores[..., i + 1 :] = float("-inf")
        row = scores.softmax(dim=-1)
        out[:, :, i : i + 1] = row @ v
        if weights is not None:
            weights[:, :, i : i + 1] = row
    if weights is not None:
        out = out + encoding.value_terms(weights, positions, positions).double()
    extra = encoding.output_terms(q, k, v, positions, positions)  # [b, h, i, d] or None
    return out if extra is None else out + extra.double()


def layer_oracle(layer, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """What ``layer(x, positions)`` computes, in float64 from the layer's own weights: ``[b, s, d_model]``
    for x ``[b, s, d_model]`` (q, k, v of its projections, :func:`attention_oracle`, its output projection)."""
    layer = copy.deepcopy(layer).double()
    b, s, _ = x.shape
    with torch.no_grad():
        x = x.double()

        def split(projection, n) -> torch.Tensor:
            return projection(x).view(b, s, n, layer.d_head).transpose(1, 2)  # [b, n, s, d]

        groups = layer.n_heads // layer.n_kv_heads
        q = split(layer.q_proj, layer.n_heads)
        k = split(layer.k_proj, layer.n_kv_heads).repeat_interleave(groups, dim=1)
        v = split(layer.v_proj, layer.n_kv_heads).repeat_interleave(groups, dim=1)
        out = attention_oracle(
            layer.encoding,
            q,
            k,
            v,
            positions,
            project=layer.project_heads,
            causal=layer.causal,
            content=layer.encoding.content(x),  # [b, s, c] or None
        )
        return layer.out_proj(out.transpose(1, 2).reshape(b, s, layer.n_heads * layer.d_head))
