"""Applying RoPE: the one dispatcher (:func:`apply_rope`, :func:`apply_rope_qk`) to the kernels and
the eager reference."""

from __future__ import annotations

import torch

from posenc import backends
from posenc._validation import (
    check_choice,
    check_even_positive_int,
    check_float_tensor,
)
from posenc.backends import check_backend
from posenc.kernels import rope_cpu, rope_triton
from posenc.kernels.rope_admission import Item, enlarges

LAYOUTS = ("half", "interleaved")


def _check_rotation(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int | None,
    name: str = "x",
) -> int:
    """apply_rope's checks of one tensor and its tables, for every backend; the rotary width r."""
    check_choice("layout", layout, LAYOUTS)
    check_float_tensor(name, x)
    for table_name, table in (("cos", cos), ("sin", sin)):
        check_float_tensor(table_name, table)
    if x.dim() < 2:
        raise ValueError(f"{name} must be [..., s, d] with at least 2 dimensions, got shape {tuple(x.shape)}")
    width = x.shape[-1]
    rotary_dim = width if rotary_dim is None else check_even_positive_int("rotary_dim", rotary_dim)
    if rotary_dim > width or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even and at most the head width {width}, got {rotary_dim}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if cos.shape[-1] != rotary_dim // 2:
        raise ValueError(
            f"cos and sin must hold rotary_dim/2 = {rotary_dim // 2} frequencies, got {cos.shape[-1]}"
        )
    per_head = cos.dim() == 4 and x.dim() == 4
    if cos.dim() not in (2, 3) and not per_head or cos.shape[-2] != x.shape[-2]:
        raise ValueError(
            f"cos and sin must be [s, r/2] or [b, s, r/2] (or per head [b, h, s, r/2] for a 4-d {name}) with "
            f"s = {x.shape[-2]} to match {name} of shape {tuple(x.shape)}, got {tuple(cos.shape)}"
        )
    if per_head and (cos.shape[0] not in (1, x.shape[0]) or cos.shape[1] not in (1, x.shape[1])):
        raise ValueError(
            f"per-head cos and sin of shape {tuple(cos.shape)} must have batch and heads 1 or those of "
            f"{name} of shape {tuple(x.shape)}"
        )
    batch = _table_batch_axis(x, cos)
    if batch is not None and cos.shape[0] not in (1, batch):
        raise ValueError(
            f"cos and sin of shape {tuple(cos.shape)} have batch {cos.shape[0]}, but {name} of shape "
            f"{tuple(x.shape)} has batch {batch}; the batch must match (or be 1)"
        )
    for table_name, table in (("cos", cos), ("sin", sin)):
        if table.device != x.device:
            raise ValueError(
                f"{table_name} is on {table.device} and {name} on {x.device}; they must share a device"
            )
    return rotary_dim


def _table_batch_axis(x: torch.Tensor, cos: torch.Tensor) -> int | None:
    """The size of x's axis that a batched cos/sin ``[b, s, r/2]`` lines up with (None: unbatched)."""
    if cos.dim() != 3 or x.dim() < 3:  # per-head tables [b, h, s, r/2] are checked on their own
        return None
    return x.shape[0] if x.dim() == 4 else x.shape[-3]


def _overlaps(x: torch.Tensor) -> bool:
    """Whether two indices of x may address the same memory (an expanded view): unsafe to write in place."""
    extent = 1  # elements spanned by the dimensions of smaller stride
    for stride, size in sorted((st, s) for s, st in zip(x.shape, x.stride(), strict=True) if s > 1):
        if stride < extent:
            return True
        extent += (size - 1) * stride
    return False


_Item = Item


def _check_rotations(items: list[_Item], layout: str, rotary_dim: int | None, inplace: bool) -> list[int]:
    """Every check of every tensor, before anything is rotated; each tensor's rotary width."""
    rotaries = [_check_rotation(x, cos, sin, layout, rotary_dim, name) for name, x, cos, sin in items]
    if inplace:
        for name, x, cos, _ in items:
            if enlarges(x, cos):
                raise ValueError(
                    f"inplace needs cos/sin that broadcast to {name}'s shape {tuple(x.shape)}, got cos of "
                    f"shape {tuple(cos.shape)}"
                )
            if _overlaps(x):
                raise ValueError(
                    f"inplace needs {name} to own its memory, got an expanded view (shape {tuple(x.shape)}, "
                    f"strides {x.stride()})"
                )
        starts = [x.data_ptr() for _, x, _, _ in items if x.numel()]
        if len(set(starts)) < len(starts):  # views from the same element: it would turn twice
            raise ValueError(
                f"inplace needs {' and '.join(name for name, *_ in items)} not to share memory, got views that "
                "start at the same element (one tensor given as both?)"
            )
    return rotaries


def _path(backend: str, items: list[_Item], rotaries: list[int]) -> str:
    """``"eager"``, ``"native"`` or ``"triton"``: where these tensors rotate under ``backend`` (already
    resolved by :func:`posenc.backends.check_backend`).

    ``auto`` takes the Triton kernel for CUDA tensors and the C kernel for CPU tensors where they
    apply, the reference otherwise; a named kernel that cannot take the tensors raises.
    """
    if backend == "eager":
        return "eager"
    if _transformed():
        if backend != "auto":
            raise ValueError(
                f"the {backend} kernel does not run under torch.func transforms (vmap, grad, jacrev, …); "
                "backend='eager' does (backend='auto' takes it there by itself)"
            )
        return "eager"
    if backend == "auto":
        devices = {t.device.type for _, x, cos, sin in items for t in (x, cos, sin)}
        if (
            devices == {"cuda"}
            and rope_triton.TRITON_INSTALLED
            and rope_triton.refusal(items, rotaries) is None
        ):
            return "triton"
        if devices == {"cpu"} and rope_cpu.refusal(items) is None:
            return "native"
        return "eager"
    if backend == "triton":
        problem = rope_triton.refusal(items, rotaries, named=True)
    else:
        problem = rope_cpu.refusal(items)
    if problem is not None:
        error, message = problem
        raise error(message)
    return backend


def _transformed() -> bool:
    """Whether a torch.func transform (vmap, grad, …) is active: the kernels' ops do not support them.
    (torch.compile traces such code itself, so the question is not asked while it traces.)"""
    return not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active()


#: Where :func:`apply_rope` and :func:`apply_rope_qk` rotate (:data:`posenc.backends.ROPE`); the older
#: names ``"reference"`` and ``"cpu"`` are accepted for ``"eager"`` and ``"native"``.
BACKENDS = backends.ROPE

_BACKEND_DOC = """backend: where the rotation runs (:mod:`posenc.backends`).

            - ``"auto"``: the Triton kernel (:mod:`posenc.kernels.rope_triton`) for CUDA tensors where
              it applies (triton installed; float16, bfloat16 or float32; head width ≤ 256), the C
              kernel (:mod:`posenc.kernels.rope_cpu`) for CPU tensors, the reference everywhere else
              and wherever cos/sin need a gradient. Both kernels serve autograd (q and k) and
              torch.compile.
            - ``"eager"`` (alias ``"reference"``): torch ops, the product taken in x's dtype like the
              models do.
            - ``"native"`` (alias ``"cpu"``) or ``"triton"``: that kernel, or a ValueError/TypeError
              saying why it cannot take these tensors."""


def apply_rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of x by the angles whose cos/sin are given (RoPE, Su et al., 2021).

    Args:
        x: ``[b, h, s, d]`` (or ``[..., s, d]``).
        cos, sin: ``[s, r/2]`` or ``[b, s, r/2]`` from :func:`rope_cos_sin`, on x's device; for a 4-d x
            also one table per head, ``[b or 1, h or 1, s, r/2]`` (RoPE-Mixed), which rotates eagerly.
        layout: ``"half"`` pairs (k, k + r/2); ``"interleaved"`` pairs (2k, 2k+1).
        rotary_dim: rotated channels r (default: all d); the other d − r pass through.
        BACKEND

    Returns:
        Rotated x, same shape and dtype. The kernels compute in float32 (float64 for float64 x on CPU)
        from float32 cos/sin and round once: bit-identical to the reference in float32, within one
        unit of bfloat16/float16 of it there (and closer to the exact rotation).

    Raises:
        ValueError: unknown layout or backend, rotary_dim odd or wider than x, cos/sin shapes that do
            not match x or on another device; a named kernel that cannot take x (the reason).
        TypeError: non-float tensors; a named kernel's dtype limits.
    """
    backend = check_backend("rope", backend)
    items = [("x", x, cos, sin)]
    rotaries = _check_rotations(items, layout, rotary_dim, inplace=False)
    path = _path(backend, items, rotaries)
    if path == "triton":
        return rope_triton.apply_rope_triton(x, cos, sin, layout=layout, rotary_dim=rotaries[0])
    if path == "native":
        return rope_cpu.apply_rope_native(x, cos, sin, layout=layout, rotary_dim=rotaries[0])
    return _apply_rope_reference(x, cos, sin, layout, rotaries[0])


def apply_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    k_cos: torch.Tensor | None = None,
    k_sin: torch.Tensor | None = None,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k: ``(apply_rope(q, cos, sin, …), apply_rope(k, k_cos, k_sin, …))``, in one pass each.

    On CUDA the Triton kernel rotates both in one launch; on CPU the C kernel rotates each in one
    pass, and under autograd the backward pass is the same kernel rotating the gradients back.

    Args:
        q, k: ``[b, h, s, d]`` (or ``[..., s, d]``); k may have fewer heads than q (GQA) and another length.
        cos, sin: q's angles ``[s, r/2]`` or ``[b, s, r/2]``, and k's unless ``k_cos``/``k_sin`` are given.
        k_cos, k_sin: k's own angles (keys at other positions than the queries).
        layout, rotary_dim: as for :func:`apply_rope`.
        inplace: rotate q and k in their own memory and return them (they must not share elements).
        BACKEND

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape and dtype.

    Raises:
        ValueError: the errors of :func:`apply_rope`; k_cos without k_sin (or the reverse); with
            ``inplace``, cos/sin whose batch would enlarge q or k, or an expanded q or k. Nothing is
            rotated when it raises.
        TypeError: ``backend="triton"`` with q and k (or cos and sin) of different dtypes.
    """
    backend = check_backend("rope", backend)
    if (k_cos is None) != (k_sin is None):
        raise ValueError("k_cos and k_sin must be given together, or neither")
    k_cos, k_sin = (cos, sin) if k_cos is None else (k_cos, k_sin)
    items = [("q", q, cos, sin), ("k", k, k_cos, k_sin)]
    q_rotary, k_rotary = _check_rotations(items, layout, rotary_dim, inplace)
    path = _path(backend, items, [q_rotary, k_rotary])
    if path == "triton":
        return rope_triton.apply_rope_qk_triton(
            q, k, cos, sin, k_cos=k_cos, k_sin=k_sin, layout=layout, rotary_dim=q_rotary, inplace=inplace
        )
    if path == "native" and q_rotary == k_rotary:
        return rope_cpu.apply_rope_qk_native(
            q, k, cos, sin, k_cos, k_sin, layout=layout, rotary_dim=q_rotary, inplace=inplace
        )
    if path == "native":  # heads of different widths (each with its own tables): one call each
        return (
            rope_cpu.apply_rope_native(q, cos, sin, layout=layout, rotary_dim=q_rotary, inplace=inplace),
            rope_cpu.apply_rope_native(k, k_cos, k_sin, layout=layout, rotary_dim=k_rotary, inplace=inplace),
        )
    rotated = (
        _apply_rope_reference(q, cos, sin, layout, q_rotary),
        _apply_rope_reference(k, k_cos, k_sin, layout, k_rotary),
    )
    return (q.copy_(rotated[0]), k.copy_(rotated[1])) if inplace else rotated


apply_rope.__doc__ = apply_rope.__doc__.replace("BACKEND", _BACKEND_DOC)  # type: ignore[union-attr]
apply_rope_qk.__doc__ = apply_rope_qk.__doc__.replace("BACKEND", _BACKEND_DOC)  # type: ignore[union-attr]


def _apply_rope_reference(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
) -> torch.Tensor:
    """The plain torch recipe: cos/sin cast to x's dtype, products and sums in x's dtype."""
    if cos.dim() == 3 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, s, r/2]: shared by the heads
    # (per-head tables [b, h, s, r/2] broadcast as they are)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotary, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        first, second = rotary.chunk(2, dim=-1)  # [..., r/2] each
        rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    else:
        even, odd = rotary[..., 0::2], rotary[..., 1::2]  # [..., r/2] each
        rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated


__all__ = [
    "BACKENDS",
    "LAYOUTS",
    "apply_rope",
    "apply_rope_qk",
]
