"""torch.library custom ops around a RoPE kernel: what torch.compile traces and autograd differentiates.

A kernel module gives one function, ``launch(items, layout, rotary_dim, conjugate)``, that rotates
each ``(x, out, cos, sin)`` of ``items`` (one or two) into ``out`` (which may be ``x``), by minus the
angles when ``conjugate``. :func:`define` wraps it in four ops, named with the kernel's suffix:

- ``posenc::rope{suffix}(x, cos, sin, layout, rotary_dim, conjugate) -> Tensor``
- ``posenc::rope_qk{suffix}(q, k, q_cos, q_sin, k_cos, k_sin, layout, rotary_dim, conjugate) -> (Tensor, Tensor)``
- ``posenc::rope{suffix}_inplace`` and ``posenc::rope_qk{suffix}_inplace``: the same in the inputs' memory.

Each has a fake (meta) implementation, so ``torch.compile(fullgraph=True)`` traces through it, and
the out-of-place ops an autograd formula: the gradient of a rotation by θ is the rotation by −θ, the
same op with ``conjugate`` flipped (and so differentiable again). Gradients for cos/sin are not
computed: the dispatcher (:mod:`posenc.functional.rope`) never sends tables that need one here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: rotates each (x, out, cos, sin) into out: (items, layout, rotary_dim, conjugate) -> None
Launch = Callable[[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]], str, int, bool], None]


def needs_grad(x: torch.Tensor) -> bool:
    """Whether autograd records an operation on x here."""
    return torch.is_grad_enabled() and x.requires_grad


@dataclass(frozen=True)
class RopeOps:
    """The four custom ops of one kernel, and the two ways to call them."""

    rope: Callable
    rope_qk: Callable
    rope_inplace: Callable
    rope_qk_inplace: Callable

    def rotate(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        layout: str,
        rotary_dim: int,
        inplace: bool,
    ) -> torch.Tensor:
        """x rotated (in its own memory with ``inplace``; under autograd out of place, then copied in)."""
        if not inplace:
            return self.rope(x, cos, sin, layout, rotary_dim, False)
        if needs_grad(x):  # autograd records the functional op and the copy
            return x.copy_(self.rope(x, cos, sin, layout, rotary_dim, False))
        self.rope_inplace(x, cos, sin, layout, rotary_dim)
        return x

    def rotate_qk(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        layout: str,
        rotary_dim: int,
        inplace: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k rotated by their tables ``(q_cos, q_sin, k_cos, k_sin)``, in one op."""
        if not inplace:
            return self.rope_qk(q, k, *tables, layout, rotary_dim, False)
        if needs_grad(q) or needs_grad(k):
            q_rotated, k_rotated = self.rope_qk(q, k, *tables, layout, rotary_dim, False)
            return q.copy_(q_rotated), k.copy_(k_rotated)
        self.rope_qk_inplace(q, k, *tables, layout, rotary_dim)
        return q, k


def define(suffix: str, launch: Launch) -> RopeOps:
    """Register the four ops ``posenc::rope{suffix}…`` around ``launch`` (once per process)."""

    def rope(
        x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int, conjugate: bool
    ) -> torch.Tensor:
        out = torch.empty_like(x)
        launch([(x, out, cos, sin)], layout, rotary_dim, conjugate)
        return out

    def rope_qk(
        q: torch.Tensor,
        k: torch.Tensor,
        q_cos: torch.Tensor,
        q_sin: torch.Tensor,
        k_cos: torch.Tensor,
        k_sin: torch.Tensor,
        layout: str,
        rotary_dim: int,
        conjugate: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        launch([(q, q_out, q_cos, q_sin), (k, k_out, k_cos, k_sin)], layout, rotary_dim, conjugate)
        return q_out, k_out

    def rope_inplace(
        x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
    ) -> None:
        launch([(x, x, cos, sin)], layout, rotary_dim, False)

    def rope_qk_inplace(
        q: torch.Tensor,
        k: torch.Tensor,
        q_cos: torch.Tensor,
        q_sin: torch.Tensor,
        k_cos: torch.Tensor,
        k_sin: torch.Tensor,
        layout: str,
        rotary_dim: int,
    ) -> None:
        launch([(q, q, q_cos, q_sin), (k, k, k_cos, k_sin)], layout, rotary_dim, False)

    rope.__doc__ = "x rotated by the angles of cos/sin (by their negatives when ``conjugate``), a new tensor."
    rope_qk.__doc__ = "q and k rotated, each by its own cos/sin (they may be the same tensors)."
    rope_inplace.__doc__ = "x rotated in its own memory (autograd: the functional op and a copy)."
    rope_qk_inplace.__doc__ = "q and k rotated in their own memory."

    rope_op = torch.library.custom_op(f"posenc::rope{suffix}", rope, mutates_args=())
    rope_qk_op = torch.library.custom_op(f"posenc::rope_qk{suffix}", rope_qk, mutates_args=())
    rope_inplace_op = torch.library.custom_op(
        f"posenc::rope{suffix}_inplace", rope_inplace, mutates_args=("x",)
    )
    rope_qk_inplace_op = torch.library.custom_op(
        f"posenc::rope_qk{suffix}_inplace", rope_qk_inplace, mutates_args=("q", "k")
    )

    @rope_op.register_fake
    def _(x, cos, sin, layout, rotary_dim, conjugate):
        return torch.empty_like(x)

    @rope_qk_op.register_fake
    def _(q, k, q_cos, q_sin, k_cos, k_sin, layout, rotary_dim, conjugate):
        return torch.empty_like(q), torch.empty_like(k)

    @rope_inplace_op.register_fake
    def _(x, cos, sin, layout, rotary_dim):
        return None

    @rope_qk_inplace_op.register_fake
    def _(q, k, q_cos, q_sin, k_cos, k_sin, layout, rotary_dim):
        return None

    def save_angles(ctx, inputs, output) -> None:
        *_, layout, rotary_dim, conjugate = inputs
        tables = inputs[1:3] if len(inputs) == 6 else inputs[2:6]
        ctx.save_for_backward(*tables)
        ctx.layout, ctx.rotary_dim, ctx.conjugate = layout, rotary_dim, conjugate

    def rope_backward(ctx, grad):
        """d(R(θ)x)/dx applied to grad is R(−θ)·grad: the same op, conjugated."""
        cos, sin = ctx.saved_tensors
        rotated = rope_op(grad, cos, sin, ctx.layout, ctx.rotary_dim, not ctx.conjugate)
        return rotated, None, None, None, None, None

    def rope_qk_backward(ctx, grad_q, grad_k):
        q_cos, q_sin, k_cos, k_sin = ctx.saved_tensors
        rotated = rope_qk_op(
            grad_q, grad_k, q_cos, q_sin, k_cos, k_sin, ctx.layout, ctx.rotary_dim, not ctx.conjugate
        )
        return *rotated, None, None, None, None, None, None, None

    rope_op.register_autograd(rope_backward, setup_context=save_angles)
    rope_qk_op.register_autograd(rope_qk_backward, setup_context=save_angles)
    return RopeOps(rope_op, rope_qk_op, rope_inplace_op, rope_qk_inplace_op)
