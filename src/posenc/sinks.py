"""Learned attention sinks: one logit per head in the softmax's denominator (GPT-OSS).

softmax over [q·kᵀ·scale + mask, sink_h], with the sink's column dropped afterwards: each query may put
weight on "nothing", so its weights over the keys sum to σ(lse − sink_h) ≤ 1, where lse is the
log-sum-exp of its scores over the keys. (GPT-OSS's ``sinks`` parameter of shape [h]; Xiao et al. 2024,
arXiv 2309.17453, for sinks as learned tokens.)

So the output is the usual attention's times σ(lse − sink): :func:`sink_attention` runs SDPA's flash
kernel on CPU, which returns lse, and rescales, without an [i, j] tensor of scores. Its backward
calls the flash kernel's backward with the rescaled output and the incoming gradient times the
rescaling: the kernel's rowsum(dO ⊙ O) term then carries the lse's share of the gradient exactly, and
the sinks get −Σ rowsum(dF ⊙ out) · (1 − σ). Elsewhere (CUDA, a learned bias, under compile) the
explicit form :func:`sink_weights` serves.

Notation used for tensor shapes: b batch, h heads, i / j query / key positions, d head width.
"""

from __future__ import annotations

import torch

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def check_sinks(sinks: object, n_heads: int) -> torch.Tensor | None:
    """The initial sink logits ``[h]`` (float32) that ``sinks`` asks for: False/None none, True zeros,
    a sequence or tensor of one logit per head as given.

    Raises:
        ValueError: a tensor or sequence whose length is not ``n_heads``, or non-finite logits.
        TypeError: anything else.
    """
    if sinks is None or sinks is False:
        return None
    if sinks is True:
        return torch.zeros(n_heads)
    if isinstance(sinks, torch.Tensor | list | tuple):
        values = torch.as_tensor(sinks, dtype=torch.float32).detach().clone()
        if values.dim() != 1 or values.shape[0] != n_heads:
            raise ValueError(
                f"sinks must hold one logit per head ({n_heads} heads), got shape {tuple(values.shape)}"
            )
        if not bool(values.isfinite().all()):
            raise ValueError(f"sinks must be finite logits, got {values.tolist()}")
        return values
    raise TypeError(f"sinks must be a bool or one logit per head (a tensor of shape [h]), got {sinks!r}")


def sink_weights(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Attention weights ``[b, h, i, j]`` of scores ``[b, h, i, j]`` (−inf where hidden) with one sink
    logit per head ``[h]`` in the denominator: softmax over the scores and the sink, the sink dropped.
    The reference form, as GPT-OSS's eager attention writes it."""
    b, h, i, _ = scores.shape
    column = sinks.to(scores.dtype).view(1, h, 1, 1).expand(b, h, i, 1)  # [b, h, i, 1]
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]


def _fast(q: torch.Tensor, attn_mask: torch.Tensor | None) -> bool:
    return (
        q.device.type == "cpu"
        and q.dtype in (torch.float32, torch.float64, torch.bfloat16)
        and not torch.compiler.is_compiling()
        and (attn_mask is None or not attn_mask.requires_grad)
    )


def sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor | None,
    *,
    scale: float,
    is_causal: bool = False,
    attn_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax([q·kᵀ·scale + mask, sink])·v with the sink's column dropped, ``[b, h, i, d]``.

    q ``[b, h, i, d]``; k, v ``[b, h, j, d]`` (grouped heads already repeated); sinks ``[h]``, or None
    for none (a masked flash call with the kernel's own backward, where SDPA on CPU takes its math
    backend for a mask when q, k or v need gradients);
    ``is_causal`` as SDPA's (query r sees keys ≤ r); ``attn_mask`` bool (True: visible) or float,
    broadcastable to ``[b, h, i, j]``.
    """
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            ~attn_mask, float("-inf")
        )
    if _fast(q, attn_mask):
        if attn_mask is not None:
            attn_mask = attn_mask.to(q.dtype)
            while attn_mask.dim() < 4:
                attn_mask = attn_mask.unsqueeze(0)
        return _SinkFlash.apply(q, k, v, sinks, scale, is_causal, attn_mask)
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale  # [b, h, i, j]
    if is_causal:
        i, j = scores.shape[-2:]
        causal = torch.ones(i, j, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask.to(dtype)
    weights = scores.softmax(dim=-1) if sinks is None else sink_weights(scores, sinks)
    return (weights @ v.to(dtype)).to(q.dtype)


class _SinkFlash(torch.autograd.Function):
    """The flash kernel's output times σ(lse − sink), with the gradient described in the module's docstring."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, scale, is_causal, attn_mask):
        out, lse = _flash(
            q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale
        )  # [b, h, i, d], [b, h, i]
        if sinks is None:  # the kernel's output as it is, and its own backward
            ctx.save_for_backward(q, k, v, attn_mask, out, lse, None)
            ctx.scale, ctx.is_causal = scale, is_causal
            return out
        kept = torch.sigmoid(lse - sinks.to(lse.dtype).view(1, -1, 1))  # [b, h, i]: weight left on the keys
        final = out * kept.unsqueeze(-1).to(out.dtype)  # [b, h, i, d]
        ctx.save_for_backward(q, k, v, attn_mask, final, lse, kept)
        ctx.scale, ctx.is_causal, ctx.sinks_dtype = scale, is_causal, sinks.dtype
        return final

    @staticmethod
    def backward(ctx, grad):
        q, k, v, attn_mask, final, lse, kept = ctx.saved_tensors
        grad = grad.contiguous()
        if kept is None:
            gq, gk, gv = _flash_backward(
                grad, q, k, v, final, lse, 0.0, ctx.is_causal, attn_mask=attn_mask, scale=ctx.scale
            )
            return gq, gk, gv, None, None, None, None
        grad_out = grad * kept.unsqueeze(-1).to(grad.dtype)  # [b, h, i, d]
        gq, gk, gv = _flash_backward(
            grad_out, q, k, v, final, lse, 0.0, ctx.is_causal, attn_mask=attn_mask, scale=ctx.scale
        )
        row = (grad.to(lse.dtype) * final.to(lse.dtype)).sum(-1)  # [b, h, i]
        g_sinks = -(row * (1 - kept)).sum(dim=(0, 2)).to(ctx.sinks_dtype)  # [h]
        return gq, gk, gv, g_sinks, None, None, None
