"""RoPE on q and k in one Triton launch, forward and backward (RoFormer, Su et al., 2021,
https://arxiv.org/abs/2104.09864).

On a GPU, rotating q and k is pure data movement: read each element once, write it once. The kernel
here does that for q and k together, in either pairing (``layout="half"`` or ``"interleaved"``), with
partial rotary (channels past ``rotary_dim`` pass through), positions ``[s]`` or ``[b, s]`` given as
cos/sin tables ``[s, r/2]`` or ``[b, s, r/2]`` (a KV-cache offset and packed sequences are just
positions), different head counts for q and k (GQA), any strides (a ``[b, s, h, d]`` tensor viewed as
``[b, h, s, d]`` is rotated without a copy), in place or out of place.

Numerics: q and k are read in their dtype (float16, bfloat16 or float32), rotated in float32 with the
float32 cos/sin of :func:`posenc.functional.rope_cos_sin` (exact angles, rounded once), and rounded once
to their dtype, to nearest even (bfloat16 by integer arithmetic on the float32 bits, because Triton's
interpreter truncates on that conversion). The gradient of a rotation by θ is the rotation by −θ, so
the backward pass is the same kernel with sin negated.

The kernels are ``torch.library`` custom ops (``posenc::rope``, ``posenc::rope_qk`` and their
``_inplace`` twins, made by :mod:`posenc.kernels._rope_ops`) with fake (meta) implementations, so
``torch.compile(fullgraph=True)`` traces through them, and an autograd formula registered on the
out-of-place ops (``torch.library.register_autograd``, torch's autograd Function for custom ops).

The entry points :func:`apply_rope_triton` and :func:`apply_rope_qk_triton` take arguments that
:func:`posenc.functional.apply_rope` and :func:`posenc.functional.apply_rope_qk` have checked; call
those (``backend="triton"``, or ``"auto"`` for CUDA tensors). :data:`DTYPES` and :data:`MAX_D_HEAD`
are the limits the dispatcher checks against.

Devices: CUDA tensors run the compiled kernel. CPU tensors run it in Triton's interpreter, and only
when ``TRITON_INTERPRET=1`` is set (read at each call): slow, for tests. ``triton`` is imported on the
first launch, so posenc imports without it.

Notation used for tensor shapes: b batch, h heads, s sequence, d head width, r rotary_dim.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from posenc.kernels import _rope_ops
from posenc.kernels.rope_admission import (
    PER_HEAD_TABLES,
    Item,
    Refusal,
    enlarge_refusal,
    enlarges,
    needs_grad,
)

#: The widest head the kernels take (one program holds whole rows of a head).
MAX_D_HEAD = 256
#: dtypes of q and k the kernels take; cos/sin may be float32, float64 or q's dtype.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["triton"] is None (import blocked)
        return False


#: Whether the triton package is installed (it is imported on the first launch only).
TRITON_INSTALLED = _triton_installed()

#: Elements of one pair-half tile [BLOCK_S, BLOCK_H, BLOCK_R] per loop step of a program.
_TILE = 2048

tl = None  # triton.language, bound by _kernel() on the first launch


def _rope_kernel(
    q,
    q_out,
    q_cos,
    q_sin,
    k,
    k_out,
    k_cos,
    k_sin,
    q_nb,
    q_nh,
    q_ns,
    k_nb,
    k_nh,
    k_ns,
    q_sb,
    q_sh,
    q_ss,
    q_sd,
    qo_sb,
    qo_sh,
    qo_ss,
    qo_sd,
    k_sb,
    k_sh,
    k_ss,
    k_sd,
    ko_sb,
    ko_sh,
    ko_ss,
    ko_sd,
    q_cb,
    k_cb,
    s_blocks,
    half,
    rest,
    TENSORS: tl.constexpr,
    HALF_SPLIT: tl.constexpr,
    CONJUGATE: tl.constexpr,
    COPY_REST: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """One program: BLOCK_S positions of one batch row, every head of q (then k), BLOCK_H at a time.

    Tensors are seen as [nb, nh, ns, d] with element strides (batch, head, seq, channel); cos/sin are
    contiguous [nb or 1, ns, r/2] float32 with batch stride cb (0: shared by the batch).
    """
    pid = tl.program_id(0).to(tl.int64)
    batch = pid // s_blocks
    s = (pid % s_blocks) * BLOCK_S + tl.arange(0, BLOCK_S)  # [S]
    j = tl.arange(0, BLOCK_R)  # [R]: pair index
    pair = j < half
    heads = tl.arange(0, BLOCK_H)  # [H]
    for t in tl.static_range(TENSORS):
        x = q if t == 0 else k
        out = q_out if t == 0 else k_out
        cos_table = q_cos if t == 0 else k_cos
        sin_table = q_sin if t == 0 else k_sin
        nb = q_nb if t == 0 else k_nb
        nh = q_nh if t == 0 else k_nh
        ns = q_ns if t == 0 else k_ns
        xb = q_sb if t == 0 else k_sb
        xh = q_sh if t == 0 else k_sh
        xs = q_ss if t == 0 else k_ss
        xd = q_sd if t == 0 else k_sd
        ob = qo_sb if t == 0 else ko_sb
        oh = qo_sh if t == 0 else ko_sh
        os_ = qo_ss if t == 0 else ko_ss
        od = qo_sd if t == 0 else ko_sd
        cb = q_cb if t == 0 else k_cb

        rows = (s < ns) & (batch < nb)  # [S]
        table = batch * cb + s[:, None] * half + j[None, :]  # [S, R]
        angle_mask = rows[:, None] & pair[None, :]
        cos = tl.load(cos_table + table, mask=angle_mask, other=0.0)[:, None, :]  # [S, 1, R] float32
        sin = tl.load(sin_table + table, mask=angle_mask, other=0.0)[:, None, :]
        if CONJUGATE:  # the backward pass: rotate by −θ
            sin = -sin
        for h0 in range(0, nh, BLOCK_H):
            h = (h0 + heads).to(tl.int64)  # [H]; 64-bit offsets: h·stride can pass 2^31
            live = rows[:, None, None] & (h < nh)[None, :, None]  # [S, H, 1]
            src = x + batch * xb + h[None, :, None] * xh + s[:, None, None] * xs  # [S, H, 1] row starts
            dst = out + batch * ob + h[None, :, None] * oh + s[:, None, None] * os_
            if HALF_SPLIT:  # pairs (i, i + r/2): two contiguous loads
                first, second = j[None, None, :], (j + half)[None, None, :]  # [1, 1, R]
                mask = live & pair[None, None, :]  # [S, H, R]
                x1 = tl.load(src + first * xd, mask=mask).to(tl.float32)
                x2 = tl.load(src + second * xd, mask=mask).to(tl.float32)
            else:  # pairs (2i, 2i + 1): one contiguous load of 2·r/2 channels, split into even and odd
                channel = tl.arange(0, 2 * BLOCK_R)[None, None, :]  # [1, 1, 2R]
                mask = live & (channel < 2 * half)  # [S, H, 2R]
                row = tl.load(src + channel * xd, mask=mask).to(tl.float32)
                x1, x2 = tl.split(tl.reshape(row, (BLOCK_S, BLOCK_H, BLOCK_R, 2)))  # [S, H, R] each
            rotated = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)  # [S, H, R, 2] float32
            if ROUND_BF16:  # nearest even by hand: the same bits compiled and in Triton's interpreter
                bits = rotated.to(tl.uint32, bitcast=True)
                bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
                bits = tl.where(rotated != rotated, 0x7FC0, bits)  # NaN stays NaN
                rotated = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
            else:
                rotated = rotated.to(out.dtype.element_ty)
            if HALF_SPLIT:
                y1, y2 = tl.split(rotated)  # [S, H, R] each
                tl.store(dst + first * od, y1, mask=mask)
                tl.store(dst + second * od, y2, mask=mask)
            else:
                tl.store(dst + channel * od, tl.reshape(rotated, (BLOCK_S, BLOCK_H, 2 * BLOCK_R)), mask=mask)
            if COPY_REST:  # out of place: channels past rotary_dim pass through
                channel = 2 * half + tl.arange(0, BLOCK_P)[None, None, :]  # [1, 1, P]
                mask = live & (channel < 2 * half + rest)
                tl.store(dst + channel * od, tl.load(src + channel * xd, mask=mask), mask=mask)


_kernels: dict[bool, object] = {}


def _kernel(interpret: bool):
    """The kernel, compiled (CUDA) or interpreted (CPU, TRITON_INTERPRET=1); built once per mode.

    Built here rather than by ``@triton.jit`` at import, which would fix the mode for the process by
    the environment at import time (and import triton with posenc).
    """
    global tl
    if interpret not in _kernels:
        if not TRITON_INSTALLED:
            raise RuntimeError("the Triton RoPE kernels need the triton package (pip install triton)")
        import triton
        import triton.language

        tl = triton.language
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction

            _kernels[interpret] = InterpretedFunction(_rope_kernel)
        else:
            _kernels[interpret] = triton.JITFunction(_rope_kernel)
    return _kernels[interpret]


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for Triton's interpreter (read at each call)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def triton_available(device: torch.device | str = "cuda") -> bool:
    """Whether the kernels can run on ``device``: triton installed, and CUDA (or the interpreter on CPU)."""
    device = torch.device(device)
    if not TRITON_INSTALLED:
        return False
    if device.type == "cuda":
        return torch.cuda.is_available()
    return device.type == "cpu" and interpreting()


# --- launching ------------------------------------------------------------------------------------


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _as_4d(x: torch.Tensor, batched_table: bool) -> torch.Tensor:
    """x as a [nb, nh, ns, d] view, the axes lined up as apply_rope lines cos/sin up with them."""
    if x.dim() == 4:
        return x
    if x.dim() == 3:  # [b, s, d] with [b, s, r/2] tables; [n, s, d] with [s, r/2] ones
        return x.unsqueeze(1) if batched_table else x.unsqueeze(0)
    return x[None, None]  # [s, d]


def _table(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """cos or sin as contiguous float32, and its batch stride (0: one table for the whole batch)."""
    t = t.to(torch.float32).contiguous()  # [(b,) s, r/2]
    shared = t.dim() == 2 or t.shape[0] == 1
    return t, 0 if shared else t.shape[1] * t.shape[2]


def _launch(
    items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
    layout: str,
    rotary_dim: int,
    conjugate: bool,
) -> None:
    """Rotate each (x, out, cos, sin) into out (out may be x), all in one launch (one or two tensors)."""
    views = []
    for x, out, cos, sin in items:
        cos, cb = _table(cos)
        sin, _ = _table(sin)
        batched = cos.dim() == 3
        views.append((_as_4d(x, batched), _as_4d(out, batched), cos, sin, cb))
    if len(views) == 1:
        views.append(views[0])  # k's arguments are never read with TENSORS=1
    (q, q_out, q_cos, q_sin, q_cb), (k, k_out, k_cos, k_sin, k_cb) = views
    tensors = len(items)
    nb = max(q.shape[0], k.shape[0] if tensors == 2 else 0)
    nh = max(q.shape[1], k.shape[1] if tensors == 2 else 0)
    ns = max(q.shape[2], k.shape[2] if tensors == 2 else 0)
    half, rest = rotary_dim // 2, q.shape[-1] - rotary_dim
    if nb * nh * ns == 0:
        return
    block_r = _next_power_of_2(half)
    block_h = min(_next_power_of_2(nh), max(1, _TILE // block_r))
    block_s = min(_next_power_of_2(ns), max(1, _TILE // (block_h * block_r)))
    s_blocks = -(-ns // block_s)
    copy_rest = rest > 0 and any(out.data_ptr() != x.data_ptr() for x, out, *_ in items)
    num_warps = max(1, min(8, block_s * block_h * block_r // 256))
    kernel = _kernel(interpreting())
    args = (
        q,
        q_out,
        q_cos,
        q_sin,
        k,
        k_out,
        k_cos,
        k_sin,
        *q.shape[:3],
        *k.shape[:3],
        *q.stride(),
        *q_out.stride(),
        *k.stride(),
        *k_out.stride(),
        q_cb,
        k_cb,
        s_blocks,
        half,
        rest,
    )
    meta = {
        "TENSORS": tensors,
        "HALF_SPLIT": layout == "half",
        "CONJUGATE": conjugate,
        "COPY_REST": copy_rest,
        "ROUND_BF16": q.dtype == torch.bfloat16,
        "BLOCK_S": block_s,
        "BLOCK_H": block_h,
        "BLOCK_R": block_r,
        "BLOCK_P": _next_power_of_2(max(rest, 1)),
    }
    grid = (nb * s_blocks,)
    if q.device.type == "cuda":
        with torch.cuda.device(q.device):
            kernel[grid](*args, **meta, num_warps=num_warps)
    else:
        kernel[grid](*args, **meta)


# --- entry points (arguments checked by posenc.functional.apply_rope / apply_rope_qk) ---------------

_OPS = _rope_ops.define("", _launch)


def apply_rope_triton(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
) -> torch.Tensor:
    """One tensor through the Triton kernel: ``apply_rope(x, cos, sin, backend="triton")``, unchecked.

    Arguments as :func:`apply_rope_qk_triton` takes them for a single ``x``.
    """
    rotary = x.shape[-1] if rotary_dim is None else rotary_dim
    return _OPS.rotate(x, cos.to(torch.float32), sin.to(torch.float32), layout, rotary, inplace)


def apply_rope_qk_triton(
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in one Triton launch: ``apply_rope_qk(..., backend="triton")``, unchecked.

    Arguments are checked by :func:`posenc.functional.apply_rope_qk` (call that; it raises a
    ValueError or TypeError naming what is wrong, where this function would fail inside Triton):

    Args:
        q, k: ``[b, h, s, d]`` (or ``[b, s, d]``, ``[n, s, d]``, ``[s, d]`` as ``apply_rope`` takes
            them), float16, bfloat16 or float32, the same dtype, on CUDA (on CPU under
            ``TRITON_INTERPRET=1``); any strides (a ``[b, s, h, d]`` tensor's ``transpose(1, 2)`` is
            rotated in place of its memory); k may have fewer heads than q (GQA) and another length
            (decoding); the same head width, at most :data:`MAX_D_HEAD`.
        cos, sin: ``[s, r/2]`` or ``[b, s, r/2]`` from :func:`posenc.functional.rope_cos_sin`, used
            as float32, without gradient, whose batch does not enlarge q or k; q's angles, and k's
            unless ``k_cos``/``k_sin`` are given.
        k_cos, k_sin: k's own angles (k at other positions than q, or xPos's inverse scale).
        layout: ``"half"`` pairs (i, i + r/2); ``"interleaved"`` pairs (2i, 2i+1).
        rotary_dim: rotated channels r, even (default: all d); the other d − r pass through.
        inplace: rotate q and k in their own memory (which they must own) and return them. Under
            autograd the rotation is computed out of place and copied in.

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape and dtype; differentiable in q and k.

    Raises:
        RuntimeError: triton is not installed.
    """
    k_cos, k_sin = (cos, sin) if k_cos is None else (k_cos, k_sin)
    rotary = q.shape[-1] if rotary_dim is None else rotary_dim
    tables = tuple(t.to(torch.float32) for t in (cos, sin, k_cos, k_sin))
    return _OPS.rotate_qk(q, k, tables, layout, rotary, inplace)  # type: ignore[arg-type]


# --- admission: what these kernels take -----------------------------------------------------------


def _tables_refusal(items: list[Item]) -> Refusal | None:
    """The table dtypes the Triton kernels take when named (``auto`` casts any to float32)."""
    for name, x, cos, sin in items:
        if cos.dtype != sin.dtype:
            return TypeError, f"cos and sin must have the same dtype, got cos {cos.dtype} and sin {sin.dtype}"
        if cos.dtype not in (torch.float32, torch.float64, x.dtype):
            return TypeError, (
                f"cos and sin must be float32, float64 or {name}'s dtype {x.dtype}, got {cos.dtype}"
            )
    return None


def refusal(items: list[Item], rotaries: list[int], *, named: bool = False) -> Refusal | None:
    """Why these Triton kernels cannot take these tensors (in one launch), or None: the dispatcher falls
    back to the reference (``backend="auto"``, which casts any table to float32) or raises it
    (``named``: ``backend="triton"``, which also checks the tables' dtypes)."""
    if named and (problem := _tables_refusal(items)) is not None:
        return problem
    _, q, _, _ = items[0]
    for name, x, cos, sin in items:
        if x.dtype not in DTYPES:
            return (
                TypeError,
                f"{name} must be float16, bfloat16 or float32 for the Triton kernels, got {x.dtype}",
            )
        if x.dtype != q.dtype:
            return TypeError, f"q and k must have the same dtype, got q {q.dtype} and k {x.dtype}"
        if x.shape[-1] > MAX_D_HEAD:
            return ValueError, (
                f"{name} has head width {x.shape[-1]}; the Triton kernels take at most "
                f"{MAX_D_HEAD} (MAX_D_HEAD)"
            )
        if x.dim() not in (2, 3, 4):
            return ValueError, (
                f"{name} must be [b, h, s, d], [b, s, d], [n, s, d] or [s, d], got {tuple(x.shape)}"
            )
        for table_name, table in (("cos", cos), ("sin", sin)):
            if needs_grad(table):
                return ValueError, (
                    f"the Triton kernels do not differentiate {table_name}; use apply_rope(..., backend='eager')"
                )
        if cos.dim() == 4:
            return ValueError, PER_HEAD_TABLES
        if x.device != q.device:
            return ValueError, f"q is on {q.device} and k on {x.device}; they must share a device"
        if x.device.type != "cuda" and not (x.device.type == "cpu" and interpreting()):
            return ValueError, (
                "the Triton kernels run CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (Triton's "
                f"interpreter); got a tensor on {x.device}. backend='auto' takes the native kernel there"
            )
        if enlarges(x, cos):
            return enlarge_refusal(name, x, cos, "the Triton kernels do not broadcast; their tables")
    if len(items) == 2 and (rotaries[1], items[1][1].shape[-1]) != (rotaries[0], q.shape[-1]):
        return ValueError, (
            "one launch needs q and k of the same head width and rotary_dim, got head widths "
            f"{q.shape[-1]} and {items[1][1].shape[-1]}, rotary_dim {rotaries[0]} and {rotaries[1]}"
        )
    return None
