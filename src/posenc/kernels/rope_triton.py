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
``_inplace`` twins) with fake (meta) implementations, so ``torch.compile(fullgraph=True)`` traces
through them, and an autograd formula registered on the out-of-place ops
(``torch.library.register_autograd``, torch's autograd Function for custom ops).

Devices: CUDA tensors run the compiled kernel. CPU tensors run it in Triton's interpreter, and only
when ``TRITON_INTERPRET=1`` is set (read at each call): slow, for tests. ``triton`` is imported on the
first launch, so posenc imports without it.

Notation used for tensor shapes: b batch, h heads, s sequence, d head width, r rotary_dim.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from posenc._validation import check_choice
from posenc.functional.rope import LAYOUTS, _check_rotation
from posenc.kernels.rope_cpu import _enlarges, _overlaps

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
    interpret = interpreting()
    for x, *_ in items:
        if x.device.type != "cuda" and not interpret:
            raise ValueError(
                f"the Triton kernels run CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (Triton's "
                f"interpreter); got a tensor on {x.device}. apply_rope(..., backend='auto') takes the CPU "
                "fast path there"
            )
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
    kernel = _kernel(interpret)
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


# --- custom ops: what torch.compile traces, and what autograd differentiates ----------------------


@torch.library.custom_op("posenc::rope", mutates_args=())
def _rope_op(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int, conjugate: bool
) -> torch.Tensor:
    """x rotated by the angles of cos/sin (by their negatives when ``conjugate``), a new tensor."""
    out = torch.empty_like(x)
    _launch([(x, out, cos, sin)], layout, rotary_dim, conjugate)
    return out


@_rope_op.register_fake
def _(x, cos, sin, layout, rotary_dim, conjugate):
    return torch.empty_like(x)


@torch.library.custom_op("posenc::rope_qk", mutates_args=())
def _rope_qk_op(
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
    """q and k rotated in one launch, each by its own cos/sin tables (they may be the same tensors)."""
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch([(q, q_out, q_cos, q_sin), (k, k_out, k_cos, k_sin)], layout, rotary_dim, conjugate)
    return q_out, k_out


@_rope_qk_op.register_fake
def _(q, k, q_cos, q_sin, k_cos, k_sin, layout, rotary_dim, conjugate):
    return torch.empty_like(q), torch.empty_like(k)


@torch.library.custom_op("posenc::rope_inplace", mutates_args=("x",))
def _rope_inplace_op(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
) -> None:
    """x rotated in its own memory (no autograd: the functional op plus ``copy_`` serves that)."""
    _launch([(x, x, cos, sin)], layout, rotary_dim, False)


@_rope_inplace_op.register_fake
def _(x, cos, sin, layout, rotary_dim):
    return None


@torch.library.custom_op("posenc::rope_qk_inplace", mutates_args=("q", "k"))
def _rope_qk_inplace_op(
    q: torch.Tensor,
    k: torch.Tensor,
    q_cos: torch.Tensor,
    q_sin: torch.Tensor,
    k_cos: torch.Tensor,
    k_sin: torch.Tensor,
    layout: str,
    rotary_dim: int,
) -> None:
    """q and k rotated in their own memory, in one launch."""
    _launch([(q, q, q_cos, q_sin), (k, k, k_cos, k_sin)], layout, rotary_dim, False)


@_rope_qk_inplace_op.register_fake
def _(q, k, q_cos, q_sin, k_cos, k_sin, layout, rotary_dim):
    return None


def _save_angles(ctx, inputs, output) -> None:
    *_, layout, rotary_dim, conjugate = inputs
    tables = inputs[1:3] if len(inputs) == 6 else inputs[2:6]
    ctx.save_for_backward(*tables)
    ctx.layout, ctx.rotary_dim, ctx.conjugate = layout, rotary_dim, conjugate


def _rope_backward(ctx, grad):
    """d(R(θ)x)/dx applied to grad is R(−θ)·grad: the same op, conjugated (and differentiable again)."""
    cos, sin = ctx.saved_tensors
    rotated = _rope_op(grad, cos, sin, ctx.layout, ctx.rotary_dim, not ctx.conjugate)
    return rotated, None, None, None, None, None


def _rope_qk_backward(ctx, grad_q, grad_k):
    q_cos, q_sin, k_cos, k_sin = ctx.saved_tensors
    rotated = _rope_qk_op(
        grad_q, grad_k, q_cos, q_sin, k_cos, k_sin, ctx.layout, ctx.rotary_dim, not ctx.conjugate
    )
    return *rotated, None, None, None, None, None, None, None


_rope_op.register_autograd(_rope_backward, setup_context=_save_angles)
_rope_qk_op.register_autograd(_rope_qk_backward, setup_context=_save_angles)


# --- public API -----------------------------------------------------------------------------------


def apply_rope_triton(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
) -> torch.Tensor:
    """One tensor through the Triton kernel: :func:`posenc.functional.apply_rope` with float32 math.

    Same arguments as :func:`apply_rope_qk_triton` for a single ``x``.
    """
    rotary = _checked("x", x, cos, sin, layout, rotary_dim, inplace, reference=x)
    cos, sin = cos.to(torch.float32), sin.to(torch.float32)
    if not inplace:
        return _rope_op(x, cos, sin, layout, rotary, False)
    if _needs_grad(x):  # autograd records the functional op and the copy
        return x.copy_(_rope_op(x, cos, sin, layout, rotary, False))
    _rope_inplace_op(x, cos, sin, layout, rotary)
    return x


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
    """Rotate q and k in one Triton launch (RoPE, Su et al., 2021): ``(apply_rope(q, …), apply_rope(k, …))``.

    Args:
        q, k: ``[b, h, s, d]`` (or ``[b, s, d]``, ``[n, s, d]``, ``[s, d]`` as :func:`apply_rope` takes
            them), float16, bfloat16 or float32, the same dtype; any strides (a ``[b, s, h, d]``
            tensor's ``transpose(1, 2)`` is rotated in place of its memory); k may have fewer heads
            than q (GQA) and another length (decoding).
        cos, sin: ``[s, r/2]`` or ``[b, s, r/2]`` from :func:`posenc.functional.rope_cos_sin`, float32,
            float64 or q's dtype (used as float32); q's angles, and k's unless ``k_cos``/``k_sin``.
        k_cos, k_sin: k's own angles (k at other positions than q, or xPos's inverse scale).
        layout: ``"half"`` pairs (i, i + r/2); ``"interleaved"`` pairs (2i, 2i+1).
        rotary_dim: rotated channels r (default: all d); the other d − r pass through.
        inplace: rotate q and k in their own memory and return them (no new tensors). Under autograd
            the rotation is computed out of place and copied in.

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape and dtype; differentiable in q and k.

    Raises:
        ValueError: the errors of ``apply_rope`` (layout, rotary_dim, cos/sin shapes); a head width
            above :data:`MAX_D_HEAD`; tensors on different devices, or on CPU without
            ``TRITON_INTERPRET=1``; cos/sin whose batch would enlarge q or k, or that need a gradient;
            with ``inplace``, an expanded q or k. Nothing is rotated when it raises.
        TypeError: q, k, cos or sin of an unsupported dtype, or q and k (cos and sin) of different dtypes.
        RuntimeError: triton is not installed.
    """
    if (k_cos is None) != (k_sin is None):
        raise ValueError("k_cos and k_sin must be given together, or neither")
    k_cos, k_sin = (cos, sin) if k_cos is None else (k_cos, k_sin)
    rotary = _checked("q", q, cos, sin, layout, rotary_dim, inplace, reference=q)
    k_rotary = _checked("k", k, k_cos, k_sin, layout, rotary_dim, inplace, reference=q)
    if (k_rotary, k.shape[-1]) != (rotary, q.shape[-1]):
        raise ValueError(
            "one launch needs q and k of the same head width and rotary_dim, got head widths "
            f"{q.shape[-1]} and {k.shape[-1]}, rotary_dim {rotary} and {k_rotary}"
        )
    tables = [t.to(torch.float32) for t in (cos, sin, k_cos, k_sin)]
    if not inplace:
        return _rope_qk_op(q, k, *tables, layout, rotary, False)
    if _needs_grad(q) or _needs_grad(k):
        q_rot, k_rot = _rope_qk_op(q, k, *tables, layout, rotary, False)
        return q.copy_(q_rot), k.copy_(k_rot)
    _rope_qk_inplace_op(q, k, *tables, layout, rotary)
    return q, k


def _needs_grad(x: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and x.requires_grad


def _checked(
    name: str,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int | None,
    inplace: bool,
    *,
    reference: torch.Tensor,
) -> int:
    """apply_rope's checks and the kernel's limits for one tensor; the rotary width."""
    check_choice("layout", layout, LAYOUTS)
    rotary = _check_rotation(x, cos, sin, layout, rotary_dim)
    if x.dtype not in DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32 for the Triton kernels, got {x.dtype}")
    if x.dtype != reference.dtype:
        raise TypeError(f"q and k must have the same dtype, got q {reference.dtype} and k {x.dtype}")
    if cos.dtype != sin.dtype:
        raise TypeError(f"cos and sin must have the same dtype, got cos {cos.dtype} and sin {sin.dtype}")
    if cos.dtype not in (torch.float32, torch.float64, x.dtype):
        raise TypeError(f"cos and sin must be float32, float64 or {name}'s dtype {x.dtype}, got {cos.dtype}")
    if x.shape[-1] > MAX_D_HEAD:
        raise ValueError(
            f"{name} has head width {x.shape[-1]}; the Triton kernels take at most {MAX_D_HEAD} (MAX_D_HEAD)"
        )
    if x.dim() not in (2, 3, 4):
        raise ValueError(f"{name} must be [b, h, s, d], [b, s, d], [n, s, d] or [s, d], got {tuple(x.shape)}")
    for table_name, table in (("cos", cos), ("sin", sin)):
        if table.device != x.device:
            raise ValueError(
                f"{table_name} is on {table.device} and {name} on {x.device}; they must share a device"
            )
        if _needs_grad(table):
            raise ValueError(
                f"the Triton kernels do not differentiate {table_name}; use apply_rope(..., backend='reference')"
            )
    if x.device != reference.device:
        raise ValueError(f"q is on {reference.device} and k on {x.device}; they must share a device")
    if _enlarges(x, cos):
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} would enlarge {name} of shape {tuple(x.shape)}; "
            "their batch must be 1 or the batch of the tensor they rotate"
        )
    if inplace and _overlaps(x):
        raise ValueError(
            f"inplace needs {name} to own its memory, got an expanded view (shape {tuple(x.shape)}, strides {x.stride()})"
        )
    return rotary
