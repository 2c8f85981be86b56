"""Attention with logit terms that read q, k or positions, a block of queries at a time, on CPU.

softmax(q·kᵀ·scale + T + mask)·v where T (Shaw's q·w_clip(j−i), Transformer-XL's, DeBERTa's, FIRE's,
CoPE's) is given as a function of one block of queries and the keys it sees (:class:`BlockTerms`), so no
``[b, h, s, s]`` tensor is ever held: the peak extra memory is a few ``[b, h, block, s]`` tensors.

Forward: per block of queries, T under ``no_grad``, the causal mask added to it, one call of SDPA's CPU
flash kernel (causal: against the keys up to the block's last query), its log-sum-exp kept. Backward
(recomputing, as the flash kernel's own backward does): per block, T again with autograd on, the weights
P = exp(q·kᵀ·scale + T − lse), dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)), then dq = dS·k·scale, dk = dSᵀ·q·scale,
dv = Pᵀ·dO, and the gradients of T's inputs (the block's q and k, the encoding's tables) by
``torch.autograd.grad(T, inputs, dS)``. The block's q and k are passed to T as slices of their own,
so T's gradient is one block's, never a full-size zero tensor per block.

Notation used for tensor shapes: b batch, h query heads, h_kv key/value heads, s_q / s_k query / key
length, d head width, n / m a block's queries / keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from posenc._validation import check_positive_int
from posenc.kernels.blocked import _flash, scale_of

#: Query rows per block: forward and backward each hold a few [b, h, BLOCK, s_k] tensors.
DEFAULT_BLOCK = 256


@dataclass(frozen=True)
class BlockTerms:
    """Logit terms computed per block of queries.

    ``compute(q_rows, k_keys, rows, keys, *tensors)`` gives T ``[b or 1, h or 1, n, m]`` (or ``[h, n, m]``)
    for the queries ``rows`` and keys ``keys`` (slices of q's and k's sequence), from q_rows
    ``[b, h, n, d]`` = q[:, :, rows] and k_keys ``[b, h_kv, m, d]`` = k[:, :, keys]; it may read any
    positions it closed over, and must read every tensor with a gradient through ``tensors`` (the
    encoding's tables, computed once per call with autograd) so that backward can reach them. T is a
    tensor of its own (not a view of an input): the forward writes the causal mask into it.
    ``content_scale`` multiplies the layer's scale on q·kᵀ (DeBERTa's 1/√f).
    """

    compute: Callable[..., torch.Tensor]
    tensors: tuple[torch.Tensor, ...] = ()
    content_scale: float = 1.0
    #: An exact faster form where it applies: ``direct(q, k, v, causal=…, scale=…)`` gives the output, or
    #: None where it does not apply (the blocks then run). Shaw's band and far keys.
    direct: Callable[..., torch.Tensor | None] | None = None
    #: T with its gradient written out, in place of autograd through ``compute``: ``with_grad(q_rows,
    #: k_keys, rows, keys, *tensors)`` gives (T, backward), where backward(dT) gives (dq_rows, dk_keys,
    #: (dtensor, …)), each None where there is none.
    with_grad: Callable[..., tuple] | None = None
    #: ``[h, d]`` added to every query for the content product q·kᵀ (and so to the q_rows T reads):
    #: Transformer-XL's u·k_j as (q + u)·k.
    query_shift: torch.Tensor | None = None


def worth_blocking(queries: int) -> bool:
    """Whether ``queries`` fill more than one block (:data:`DEFAULT_BLOCK`, read at the call). Up to one
    block the terms are better formed whole with autograd: one block holds every pair anyway, and the
    blocks' recomputation in the backward is pure cost (a lab step at s = 64 cost up to 1.3× more)."""
    return queries > DEFAULT_BLOCK


def query_blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    terms: BlockTerms,
    *,
    causal: bool,
    scale: float | None = None,
    block: int | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + T + mask)·v ``[b, h, s_q, d_v]`` with T from ``terms`` a block at a time.

    q ``[b, h, s_q, d]``, k and v ``[b, h_kv, s_k, ·]`` (h_kv divides h); causal: the queries are the last
    s_q of the keys and each sees the keys up to its own. CPU (SDPA's CPU flash kernel). block: query rows
    per block (default :data:`DEFAULT_BLOCK`, read at the call).
    """
    block = check_positive_int("block", DEFAULT_BLOCK if block is None else block)
    factor = scale_of(scale, q.shape[-1]) * terms.content_scale
    if terms.query_shift is not None:
        q = q + terms.query_shift.to(q.dtype).unsqueeze(-2)  # [b, h, s_q, d]
    if terms.direct is not None:
        out = terms.direct(q, k, v, causal=causal, scale=factor)
        if out is not None:
            return out
    return _QueryBlocked.apply(q, k, v, terms, causal, factor, block, *terms.tensors)


def _blocks(s_q: int, s_k: int, causal: bool, block: int) -> list[tuple[slice, slice]]:
    """(query rows, keys they see) per block: causal, the keys up to the block's last query."""
    offset = s_k - s_q
    return [
        (slice(start, min(start + block, s_q)), slice(0, offset + min(start + block, s_q) if causal else s_k))
        for start in range(0, s_q, block)
    ]


def _hidden(rows: slice, keys: slice, s_q: int, s_k: int, device) -> torch.Tensor:
    """bool ``[n, m]``: the keys after each query (queries the last s_q of the keys)."""
    first = s_k - s_q + rows.start  # the position of the block's first query
    query = torch.arange(first, first + rows.stop - rows.start, device=device)
    key = torch.arange(keys.start, keys.stop, device=device)
    return key[None, :] > query[:, None]


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


class _QueryBlocked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, terms: BlockTerms, causal: bool, factor: float, block: int, *tensors):
        b, h, s_q, _ = q.shape
        h_kv, s_k = k.shape[1], k.shape[2]
        groups = h // h_kv
        k_rep = k.repeat_interleave(groups, dim=1) if groups > 1 else k  # [b, h, s_k, d]
        v_rep = v.repeat_interleave(groups, dim=1) if groups > 1 else v
        out = q.new_empty(b, h, s_q, v.shape[-1])  # [b, h, s_q, d_v]
        lse = None  # [b, h, s_q]
        for rows, keys in _blocks(s_q, s_k, causal, block):
            mask = _as_4d(terms.compute(q[:, :, rows], k[:, :, keys], rows, keys, *tensors)).to(q.dtype)
            if causal:  # keys after a query lie in the block's last n columns (a fresh tensor: in place)
                n = rows.stop - rows.start
                square = mask[..., keys.stop - n :]
                square.masked_fill_(
                    _hidden(rows, slice(keys.stop - n, keys.stop), s_q, s_k, q.device), float("-inf")
                )
            part, part_lse = _flash(
                q[:, :, rows], k_rep[:, :, keys], v_rep[:, :, keys], attn_mask=mask, scale=factor
            )
            if lse is None:
                lse = part_lse.new_empty(b, h, s_q)
            out[:, :, rows], lse[:, :, rows] = part, part_lse
        ctx.save_for_backward(q, k, v, out, lse, *tensors)
        ctx.terms, ctx.causal, ctx.factor, ctx.block = terms, causal, factor, block
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse, *tensors = ctx.saved_tensors
        terms, causal, factor = ctx.terms, ctx.causal, ctx.factor
        b, h, s_q, d = q.shape
        h_kv, s_k = k.shape[1], k.shape[2]
        groups = h // h_kv
        wide = torch.promote_types(q.dtype, torch.float32)
        need = ctx.needs_input_grad
        grad_tensors = [torch.zeros_like(t) if need[7 + n] else None for n, t in enumerate(tensors)]
        dq = torch.zeros(q.shape, dtype=wide, device=q.device)
        dk_rep = torch.zeros(b, h, s_k, d, dtype=wide, device=q.device)  # through q·kᵀ, per query head
        dk_terms = torch.zeros(k.shape, dtype=wide, device=q.device)  # through T, per key head
        dv_rep = torch.zeros(b, h, s_k, v.shape[-1], dtype=wide, device=q.device)
        k_rep = (k.repeat_interleave(groups, dim=1) if groups > 1 else k).to(wide)
        v_rep = (v.repeat_interleave(groups, dim=1) if groups > 1 else v).to(wide)
        q_wide, g_wide = q.to(wide), grad_out.to(wide)
        rowsum = (g_wide * out.to(wide)).sum(dim=-1, keepdim=True)  # D: [b, h, s_q, 1]
        leaves = [t.detach().requires_grad_(need[7 + n]) for n, t in enumerate(tensors)]
        for rows, keys in _blocks(s_q, s_k, causal, ctx.block):
            if terms.with_grad is not None:
                term, term_backward = terms.with_grad(q[:, :, rows], k[:, :, keys], rows, keys, *tensors)
            else:
                q_rows = q[:, :, rows].detach().requires_grad_(need[0])
                k_keys = k[:, :, keys].detach().requires_grad_(need[1])
                with torch.enable_grad():
                    term = terms.compute(q_rows, k_keys, rows, keys, *leaves)  # [(b, h,) n, m]
            scores = torch.matmul(q_wide[:, :, rows], k_rep[:, :, keys].transpose(-1, -2)).mul_(factor)
            scores += term.detach().to(wide)
            scores -= lse[:, :, rows].to(wide).unsqueeze(-1)
            if causal:
                scores.masked_fill_(_hidden(rows, keys, s_q, s_k, q.device), float("-inf"))
            weights = scores.exp_()  # P [b, h, n, m]
            g_rows = g_wide[:, :, rows]
            dv_rep[:, :, keys] += torch.matmul(weights.transpose(-1, -2), g_rows)
            ds = torch.matmul(g_rows, v_rep[:, :, keys].transpose(-1, -2))  # dO·vᵀ
            ds -= rowsum[:, :, rows]
            ds *= weights  # dS [b, h, n, m]
            del weights, scores
            dq[:, :, rows] += torch.matmul(ds, k_rep[:, :, keys]).mul_(factor)
            dk_rep[:, :, keys] += torch.matmul(ds.transpose(-1, -2), q_wide[:, :, rows]).mul_(factor)
            if terms.with_grad is not None:
                g_q, g_k, g_tensors = term_backward(ds)
                if g_q is not None:
                    dq[:, :, rows] += g_q
                if g_k is not None:
                    dk_terms[:, :, keys] += g_k
                for n, g in enumerate(g_tensors):
                    if g is not None and grad_tensors[n] is not None:
                        grad_tensors[n] += g
                continue
            inputs = [(q_rows, None), (k_keys, None), *((leaf, n) for n, leaf in enumerate(leaves))]
            wanted = [(x, n) for x, n in inputs if x.requires_grad]
            if wanted and term.requires_grad:
                reduce = [dim for dim in range(4) if _as_4d(term).shape[dim] == 1 and ds.shape[dim] > 1]
                g_term = (ds.sum(dim=reduce, keepdim=True) if reduce else ds).view(term.shape).to(term.dtype)
                found = torch.autograd.grad(term, [x for x, _ in wanted], g_term, allow_unused=True)
                for (x, n), g in zip(wanted, found, strict=True):
                    if g is None:
                        continue
                    if x is q_rows:
                        dq[:, :, rows] += g
                    elif x is k_keys:
                        dk_terms[:, :, keys] += g
                    else:
                        grad_tensors[n] += g
        dk = dk_terms
        dk += dk_rep.view(b, h_kv, groups, s_k, d).sum(dim=2) if groups > 1 else dk_rep
        dv = dv_rep.view(b, h_kv, groups, s_k, -1).sum(dim=2) if groups > 1 else dv_rep
        return (
            dq.to(q.dtype) if need[0] else None,
            dk.to(k.dtype) if need[1] else None,
            dv.to(v.dtype) if need[2] else None,
            None,
            None,
            None,
            None,
            *grad_tensors,
        )
