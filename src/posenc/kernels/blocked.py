"""Attention with an additive float mask on CPU, in calls of SDPA's flash kernel, with a backward of its own.

softmax(q·kᵀ·scale + mask)·v, where the mask (bias plus −inf for hidden keys) is read, call by call,
as views of one tensor: a per-distance table seen as a Toeplitz matrix
(:mod:`posenc.kernels.per_distance`), or a materialised ``[(b,) h, i, j]`` bias (:func:`biased_attention`).

Why: autograd through a loop of ``scaled_dot_product_attention`` calls on slices allocates a full-size
zero gradient per slice (slice backward), and a mask that requires grad sends SDPA to its math
backend, which materialises the weights and their gradient. Here the forward runs the flash kernel
per call and keeps its log-sum-exp; the backward writes each call's gradients into one tensor per
input. With a mask that requires no gradient, each call's q, k, v gradients come from the flash
kernel's backward. With one that does (learned biases: T5, Kerple, Swin v2), the backward of a block
of queries recomputes its weights P = exp(s + mask − lse), forms dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)),
and gives dq = dS·k·scale, dk = dSᵀ·q·scale, dv = Pᵀ·dO and the mask's gradient dS, which the layout
adds to the tensor the views read (summing a Toeplitz table's views along their diagonals): five
matrix products, as the flash kernel's backward does, and no second pass for the mask.

Notation used for tensor shapes: b batch, h heads, s_q / s_k query / key length, d head width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Query rows per call of a causal materialised bias: each call reads the keys up to its last query.
DEFAULT_BLOCK = 256
#: Query rows per step of the backward with the mask's gradient: a causal step reads the keys up to its
#: last query, so smaller steps skip more of the hidden triangle (and pay more, smaller products).
BACKWARD_ROWS = 64
#: Scores one step of the backward holds at most (several temporaries of this many): 64 MiB in float32.
BACKWARD_SCORES = 1 << 24

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


@dataclass(frozen=True)
class Call:
    """One flash call: heads ``h0:h1``, query rows ``r0:r1``, key rows ``k0:k1``."""

    h0: int
    h1: int
    r0: int
    r1: int
    k0: int
    k1: int


class Layout:
    """Where each call's mask lies in the one tensor it is read from, and how its gradient goes back."""

    def calls(self) -> list[Call]:
        raise NotImplementedError

    def mask(self, source: torch.Tensor, call: Call) -> torch.Tensor:
        """The call's mask ``[1 or b, h1 − h0 or 1, r1 − r0, k1 − k0]``, a view of ``source``."""
        raise NotImplementedError

    def visible(self, call: Call, rows: slice) -> slice:
        """The call's keys (relative to k0) that its rows ``rows`` (relative to r0) may see: all of them
        here; a causal layout leaves out those after the last of these rows."""
        return slice(0, call.k1 - call.k0)

    def add_grad(self, grad: torch.Tensor, ds: torch.Tensor, call: Call, rows: slice, keys: slice) -> None:
        """Add ``ds`` ``[b, h1 − h0, rows, keys]``, the gradient of the call's mask at its rows ``rows``
        and keys ``keys`` (relative to r0 and k0), into ``grad``, shaped as the source."""
        raise NotImplementedError


class DenseLayout(Layout):
    """A materialised mask ``[B, H, s_q, s_k]`` (B ∈ {1, b}, H ∈ {1, h}); causal: blocks of queries, each
    against the keys up to its last query (queries are the last s_q of the keys)."""

    def __init__(self, shape: torch.Size, h: int, s_q: int, s_k: int, causal: bool, block: int) -> None:
        self.shape, self.h, self.s_q, self.s_k = shape, h, s_q, s_k
        self.causal, self.block = causal, block

    def calls(self) -> list[Call]:
        if not self.causal:
            return [Call(0, self.h, 0, self.s_q, 0, self.s_k)]
        offset = self.s_k - self.s_q
        return [
            Call(
                0,
                self.h,
                start,
                min(start + self.block, self.s_q),
                0,
                offset + min(start + self.block, self.s_q),
            )
            for start in range(0, self.s_q, self.block)
        ]

    def mask(self, source: torch.Tensor, call: Call) -> torch.Tensor:
        heads = slice(call.h0, call.h1) if source.shape[1] > 1 else slice(None)
        return source[:, heads, call.r0 : call.r1, call.k0 : call.k1]

    def visible(self, call: Call, rows: slice) -> slice:
        if not self.causal:
            return slice(0, call.k1 - call.k0)
        return slice(0, min(call.k1, self.s_k - self.s_q + call.r0 + rows.stop) - call.k0)

    def add_grad(self, grad: torch.Tensor, ds: torch.Tensor, call: Call, rows: slice, keys: slice) -> None:
        reduce = tuple(dim for dim in (0, 1) if grad.shape[dim] == 1 and ds.shape[dim] > 1)
        ds = ds.sum(dim=reduce, keepdim=True) if reduce else ds
        heads = slice(call.h0, call.h1) if grad.shape[1] > 1 else slice(None)
        grad[
            :, heads, call.r0 + rows.start : call.r0 + rows.stop, call.k0 + keys.start : call.k0 + keys.stop
        ] += ds


def scale_of(scale: float | None, d: int) -> float:
    """The factor on q·kᵀ: ``scale``, or 1/√d as SDPA computes it."""
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def differentiable(*tensors: torch.Tensor) -> bool:
    """Whether autograd will record a call on these tensors (the blocked function is then worth it)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    source: torch.Tensor,
    layout: Layout,
    scale: float | None,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + mask)·v ``[b, h, s_q, d_v]`` in the layout's flash calls, with the backward
    described in the module docstring; q ``[b, h, s_q, d]``, k and v ``[b, h, s_k, ·]`` (heads repeated
    for grouped queries), ``source`` the tensor the calls' masks are views of. CPU only."""
    return _Blocked.apply(q, k, v, source, layout, scale)


class _Blocked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, source, layout: Layout, scale):
        b, h, s_q, _ = q.shape
        out = q.new_empty(b, h, s_q, v.shape[-1])  # [b, h, s_q, d_v]
        lse = None  # [b, h, s_q]: the log-sum-exp of each query's scores, as the flash kernel gives it
        for call in layout.calls():
            heads, rows, keys = slice(call.h0, call.h1), slice(call.r0, call.r1), slice(call.k0, call.k1)
            part, part_lse = _flash(
                q[:, heads, rows],
                k[:, heads, keys],
                v[:, heads, keys],
                attn_mask=layout.mask(source, call),
                scale=scale,
            )
            if lse is None:
                lse = part_lse.new_empty(b, h, s_q)
            out[:, heads, rows], lse[:, heads, rows] = part, part_lse
        ctx.save_for_backward(q, k, v, source, out, lse)
        ctx.layout, ctx.scale = layout, scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, source, out, lse = ctx.saved_tensors
        layout, scale = ctx.layout, ctx.scale
        needs_mask_grad = ctx.needs_input_grad[3]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grad_source = torch.zeros_like(source) if needs_mask_grad else None
        if needs_mask_grad:
            _explicit_backward(q, k, v, source, out, lse, grad_out, layout, scale, (dq, dk, dv), grad_source)
        else:
            grad_out = grad_out.contiguous()
            for call in layout.calls():
                heads, rows, keys = slice(call.h0, call.h1), slice(call.r0, call.r1), slice(call.k0, call.k1)
                gq, gk, gv = _flash_backward(
                    grad_out[:, heads, rows],
                    q[:, heads, rows],
                    k[:, heads, keys],
                    v[:, heads, keys],
                    out[:, heads, rows],
                    lse[:, heads, rows],
                    0.0,
                    False,
                    attn_mask=layout.mask(source, call),
                    scale=scale,
                )
                dq[:, heads, rows] += gq
                dk[:, heads, keys] += gk
                dv[:, heads, keys] += gv
        wanted = ctx.needs_input_grad
        return (
            dq if wanted[0] else None,
            dk if wanted[1] else None,
            dv if wanted[2] else None,
            grad_source,
            None,
            None,
        )


def _explicit_backward(q, k, v, source, out, lse, grad_out, layout, scale, grads, grad_source) -> None:
    """The backward with the mask's gradient: weights recomputed per block of queries (module docstring).
    Half types compute in float32; the gradients are written into ``grads`` (dq, dk, dv) and ``grad_source``."""
    dq, dk, dv = grads
    wide = torch.promote_types(q.dtype, torch.float32)
    b, h, s_q, _ = q.shape
    factor = scale_of(scale, q.shape[-1])
    # D = rowsum(dO ⊙ O): the weights' gradient is dS = P ⊙ (dO·vᵀ − D)
    rowsum = (grad_out.to(wide) * out.to(wide)).sum(dim=-1, keepdim=True)  # [b, h, s_q, 1]
    # q·scale with −lse as one more channel, against k with a channel of ones: one product gives s − lse
    q_lse = torch.cat((q.to(wide) * factor, -lse.to(wide).unsqueeze(-1)), dim=-1)  # [b, h, s_q, d + 1]
    for call in layout.calls():
        heads = slice(call.h0, call.h1)
        mask = layout.mask(source, call)  # [B, H', rows, keys]
        k_call = k[:, heads, call.k0 : call.k1].to(wide)  # [b, h', keys, d]
        k_one = torch.cat((k_call, k_call.new_ones(*k_call.shape[:-1], 1)), dim=-1)  # [b, h', keys, d + 1]
        v_call = v[:, heads, call.k0 : call.k1].to(wide)
        step = max(1, min(BACKWARD_ROWS, BACKWARD_SCORES // (b * (call.h1 - call.h0) * (call.k1 - call.k0))))
        for start in range(0, call.r1 - call.r0, step):
            local = slice(start, min(start + step, call.r1 - call.r0))
            seen = layout.visible(call, local)  # the keys these rows see, relative to k0
            rows, keys = (
                slice(call.r0 + local.start, call.r0 + local.stop),
                slice(call.k0 + seen.start, call.k0 + seen.stop),
            )
            g_rows = grad_out[:, heads, rows].to(wide)  # [b, h', n, d_v]
            weights = torch.matmul(
                q_lse[:, heads, rows], k_one[:, :, seen].transpose(-1, -2)
            )  # s − lse [b, h', n, m]
            weights += mask[:, :, local, seen]
            weights.exp_()  # P
            dv[:, heads, keys] += torch.matmul(weights.transpose(-1, -2), g_rows)
            ds = torch.matmul(g_rows, v_call[:, :, seen].transpose(-1, -2))  # dO·vᵀ [b, h', n, m]
            ds -= rowsum[:, heads, rows]
            ds *= weights  # dS
            dq[:, heads, rows] += torch.matmul(ds, k_call[:, :, seen]).mul_(factor)
            dk[:, heads, keys] += torch.matmul(ds.transpose(-1, -2), q_lse[:, heads, rows, :-1])
            layout.add_grad(grad_source, ds, call, local, seen)  # summed in the wide type, then rounded


def biased_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    block: int = DEFAULT_BLOCK,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + mask)·v for a float mask ``[i, j]`` or ``[B, H, i, j]`` (B ∈ {1, b},
    H ∈ {1, h}) that already holds −inf for hidden keys; ``[b, h, i, d_v]``.

    q ``[b, h, i, d]``, k and v ``[b, h_kv, j, ·]`` (h_kv divides h). causal: the mask hides every key
    after its query (queries the last i of the keys), so blocks of ``block`` queries read only the
    keys up to their last one. On CPU, with autograd: the mask's gradient without SDPA's math backend.
    """
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [b, h, j, ·]
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)  # [B, H, i, j]
    if mask.stride(-1) != 1:
        mask = mask.contiguous()
    layout = DenseLayout(mask.shape, q.shape[1], q.shape[2], k.shape[2], causal, block)
    return blocked_attention(q, k, v, mask, layout, scale)
