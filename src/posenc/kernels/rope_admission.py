"""What both RoPE kernels check before they take tensors: the vocabulary of their refusals.

Each kernel states its own admission rule next to its constants (``refusal`` in
:mod:`posenc.kernels.rope_cpu` and :mod:`posenc.kernels.rope_triton`); the dispatcher
(:mod:`posenc.functional.rope.apply`) asks it and either takes the kernel, falls back to the reference
(``backend="auto"``) or raises the refusal (a kernel named by the caller).
"""

from __future__ import annotations

import torch

#: (name, x, cos, sin): one tensor to rotate and its tables, as the checks name it.
Item = tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]
#: What stops a kernel from taking the tensors: the error to raise and its message.
Refusal = tuple[type[Exception], str]

#: Why the kernels refuse per-head tables (RoPE-Mixed): they read one table row per position.
PER_HEAD_TABLES = (
    "the kernels read one cos/sin row per position, shared by the heads; per-head tables [b, h, s, r/2] "
    "rotate on backend='eager' (backend='auto' takes it by itself)"
)


def needs_grad(t: torch.Tensor) -> bool:
    """Whether ``t`` takes part in autograd here (the kernels differentiate q and k, never cos/sin)."""
    return torch.is_grad_enabled() and t.requires_grad


def enlarges(x: torch.Tensor, cos: torch.Tensor) -> bool:
    """Whether the rotation of x would not have x's shape: cos/sin ``[b, s, r/2]`` with x ``[s, d]``."""
    return cos.dim() == 3 and x.dim() == 2


def enlarge_refusal(name: str, x: torch.Tensor, cos: torch.Tensor, kernel: str) -> Refusal:
    return (
        ValueError,
        f"cos/sin of shape {tuple(cos.shape)} would enlarge {name} of shape {tuple(x.shape)}; {kernel} "
        "need their batch to be 1 or the batch of the tensor they rotate (backend='eager' broadcasts)",
    )


__all__ = ["Item", "PER_HEAD_TABLES", "Refusal", "enlarge_refusal", "enlarges", "needs_grad"]
