"""RoPE's ``native`` backend: q and k rotated on CPU by a C kernel, one read and one write per element.

The entry points :func:`apply_rope_native` and :func:`apply_rope_qk_native` take arguments that
:func:`posenc.functional.apply_rope` and :func:`posenc.functional.apply_rope_qk` have checked (shapes,
layout, rotary width, CPU tensors, cos/sin without gradient, memory safe to write in place); call
those, which pick this backend (``backend="native"``, or ``"auto"`` for CPU tensors).

The C source, ``rope_cpu.c`` beside this module (package data), is compiled by the system C compiler
(``$CC``, ``cc``, ``gcc`` or ``clang``) the first time it is needed (a few seconds) and cached on disk
(``$POSENC_CACHE_DIR``, default ``~/.cache/posenc``), keyed by source, compiler, flags and CPU. Where no
compiler works, or ``POSENC_NATIVE=0``, or for dtypes the kernel lacks (float16), this backend runs its
own torch fallback: a complex multiply for interleaved pairs, ``out=`` and in-place multiply-adds for
half-split ones, in float32 for 16-bit inputs.

Numerics of the C kernel:

- float32 and float64: the same products and sums in the same order as the reference recipe
  (``backend="eager"``), built with ``-ffp-contract=off`` (no fused multiply-add): bit-identical.
- bfloat16: computed in float32 from float32 cos/sin and rounded once to bfloat16 (nearest even,
  exactly as ``.to(torch.bfloat16)`` rounds), where the reference rounds each bfloat16 product: more
  accurate, and within one bfloat16 unit of it. The torch fallback does the same (also for float16),
  up to a fused multiply-add torch may take (a rare flipped rounding).

Autograd and torch.compile: the kernel is wrapped in the custom ops ``posenc::rope_native``,
``posenc::rope_qk_native`` and their ``_inplace`` twins (:mod:`posenc.kernels._rope_ops`), with fake
implementations and an autograd formula (the gradient of a rotation by θ is the rotation by −θ, the
same kernel with sin negated), so training and ``torch.compile(fullgraph=True)`` take the kernel too.
Outside tracing the kernel is called without the op dispatch (about 20 µs per call, 100 µs per
forward and backward pass), under autograd through an autograd Function with the same formula.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from posenc.kernels import _rope_ops
from posenc.kernels.rope_admission import (
    PER_HEAD_TABLES,
    Item,
    Refusal,
    enlarge_refusal,
    enlarges,
    needs_grad,
)

_log = logging.getLogger(__name__)

#: Below this many elements per tensor the kernel runs on one thread (thread start-up would dominate).
_PARALLEL_MIN_ELEMENTS = 1 << 15
#: From this many bytes per output (more than a core's L2) the kernel writes it with non-temporal
#: stores: the output would leave the caches anyway, and a plain store first reads the line it fills,
#: a third pass over memory that a copy does not make.
_STREAM_MIN_BYTES = 4 << 20

#: x dtype -> (C name of x's type, the table dtypes its kernels read; others are cast to the first).
_KERNEL_DTYPES = {
    torch.float32: ("f32", (torch.float32, torch.float64)),
    torch.bfloat16: ("bf16", (torch.float32, torch.float64)),
    torch.float64: ("f64", (torch.float64,)),
}
_C_NAMES = {torch.float32: "f32", torch.float64: "f64"}
_LAYOUTS = ("half", "interleaved")
_SOURCE_NAME = "rope_cpu.c"
_BASE_FLAGS = ("-O3", "-ffp-contract=off", "-fPIC", "-shared")
#: Tried in order; the first that compiles wins (no OpenMP: one thread; no -march=native: generic SIMD).
_FLAG_SETS = (("-fopenmp", "-march=native"), ("-fopenmp",), ("-march=native",), ())

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": ctypes.CDLL | None, "reason": why it is None


def native_available() -> bool:
    """Whether the C kernel is built and loaded (building it now if needed; False where it cannot be)."""
    return _library() is not None


def native_status() -> str:
    """One line saying where the C kernel was loaded from, or why the torch fallback runs instead."""
    _library()
    return str(_state["reason"])


# --- entry points ---------------------------------------------------------------------------------


def apply_rope_native(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str,
    rotary_dim: int,
    inplace: bool = False,
) -> torch.Tensor:
    """x rotated by the angles of cos/sin: what ``apply_rope(x, cos, sin, backend="native")`` returns.

    Arguments as :func:`apply_rope_qk_native` takes them for one tensor, checked by the dispatcher.
    """
    if not _eager(x, cos, sin):
        return _OPS.rotate(x, cos, sin, layout, rotary_dim, inplace)
    if _rope_ops.needs_grad(x):
        (rotated,) = _Rotation.apply(layout, rotary_dim, False, None, x, cos, sin)
        return x.copy_(rotated) if inplace else rotated
    out = x if inplace else torch.empty_like(x)
    _launch([(x, out, cos, sin)], layout, rotary_dim, False)
    return out


def apply_rope_qk_native(
    q: torch.Tensor,
    k: torch.Tensor,
    q_cos: torch.Tensor,
    q_sin: torch.Tensor,
    k_cos: torch.Tensor,
    k_sin: torch.Tensor,
    *,
    layout: str,
    rotary_dim: int,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated by their own angles: ``apply_rope_qk(..., backend="native")``, unchecked.

    Arguments are checked by :func:`posenc.functional.apply_rope_qk` (call that): CPU tensors
    ``[b, h, s, d]``, ``[b, s, d]``, ``[n, s, d]`` or ``[s, d]``; cos/sin ``[s, r/2]`` or ``[b, s, r/2]``
    that do not enlarge the tensor they rotate and need no gradient; ``rotary_dim`` an even int r ≤ d;
    with ``inplace``, q and k that own their memory. Differentiable in q and k; traceable by
    torch.compile.
    """
    tables = (q_cos, q_sin, k_cos, k_sin)
    if not _eager(q, k, *tables):
        return _OPS.rotate_qk(q, k, tables, layout, rotary_dim, inplace)
    if _rope_ops.needs_grad(q) or _rope_ops.needs_grad(k):
        q_rotated, k_rotated = _Rotation.apply(
            layout, rotary_dim, False, None, q, q_cos, q_sin, k, k_cos, k_sin
        )
        return (q.copy_(q_rotated), k.copy_(k_rotated)) if inplace else (q_rotated, k_rotated)
    q_out, k_out = (q, k) if inplace else (torch.empty_like(q), torch.empty_like(k))
    _launch([(q, q_out, q_cos, q_sin), (k, k_out, k_cos, k_sin)], layout, rotary_dim, False)
    return q_out, k_out


def fallback_rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str,
    rotary_dim: int,
    inplace: bool = False,
    conjugate: bool = False,
) -> torch.Tensor:
    """The torch fallback of this backend on one tensor (what runs without a C compiler), unchecked."""
    out = x if inplace else torch.empty_like(x)
    _torch_rotate(x, out, cos, sin, layout, rotary_dim, conjugate)
    return out


def _eager(*tensors: torch.Tensor) -> bool:
    """Whether the kernel may be called as it is, without the custom ops: plain tensors, and nobody
    tracing (torch.compile, or a dispatch mode such as FakeTensorMode or torch.export's)."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    return all(type(t) is torch.Tensor for t in tensors)


class _Rotation(torch.autograd.Function):
    """Eager autograd around the kernel: ``apply(layout, rotary_dim, conjugate, like, x, cos, sin, …)``
    rotates each (x, cos, sin); the backward is the same kernel rotating the gradients back.

    The gradient of each x is written in x's own layout (its strides where x is dense, else dense in
    the order of its strides, as ``torch.empty_like(x)``), whatever the layout of the gradient that
    arrives: for q viewed from a ``[b, s, h, d]`` projection, the views' backward is then free, where
    a contiguous gradient would be copied back into the projection's layout. ``like``: per x, the
    layout of its output (an empty meta tensor), or None for ``empty_like(x)``.

    The custom ops carry the same formula for torch.compile; here the kernel is called without the
    op dispatch, which costs about 100 µs per forward and backward pass.
    """

    @staticmethod
    def forward(ctx, layout: str, rotary_dim: int, conjugate: bool, like: tuple | None, *flat: torch.Tensor):
        items = [flat[i : i + 3] for i in range(0, len(flat), 3)]  # (x, cos, sin) each
        like = like or (None,) * len(items)
        outs = tuple(_empty_as(x, shape) for (x, _, _), shape in zip(items, like, strict=True))
        _launch(
            [(x, out, c, s) for (x, c, s), out in zip(items, outs, strict=True)],
            layout,
            rotary_dim,
            conjugate,
        )
        ctx.save_for_backward(*(t for _, c, s in items for t in (c, s)))
        ctx.rotation = layout, rotary_dim, conjugate
        ctx.like = tuple(torch.empty_like(x, device="meta") for x, _, _ in items)  # no memory held
        return outs

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        layout, rotary_dim, conjugate = ctx.rotation
        tables = ctx.saved_tensors
        flat = [t for i, grad in enumerate(grads) for t in (grad, tables[2 * i], tables[2 * i + 1])]
        rotated = _Rotation.apply(layout, rotary_dim, not conjugate, ctx.like, *flat)
        return None, None, None, None, *(t for grad in rotated for t in (grad, None, None))


def _empty_as(x: torch.Tensor, like: torch.Tensor | None) -> torch.Tensor:
    """An uninitialised tensor of x's dtype and device in the layout of ``like`` (default: x's own)."""
    if like is None:
        return torch.empty_like(x)
    return torch.empty_strided(like.shape, like.stride(), dtype=x.dtype, device=x.device)


def _launch(
    items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
    layout: str,
    rotary_dim: int,
    conjugate: bool,
) -> None:
    """Rotate each (x, out, cos, sin) into out (out may be x): the C kernel where it applies, else torch."""
    for x, out, cos, sin in items:
        geometry = _native_geometry(x, out, cos)
        lib = _library() if geometry is not None else None
        if lib is not None:
            _native(lib, x, out, cos, sin, layout, rotary_dim, conjugate, geometry)
        else:
            _torch_rotate(x, out, cos, sin, layout, rotary_dim, conjugate)


_OPS = _rope_ops.define("_native", _launch)


# --- the C kernel ---------------------------------------------------------------------------------


def _native_geometry(x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor) -> tuple[int, ...] | None:
    """(nb, nh, ns, cos batched): x viewed as [nb, nh, ns, d]; None where the kernel does not apply."""
    if x.dtype not in _KERNEL_DTYPES or x.stride(-1) != 1 or out.stride(-1) != 1 or x.dim() not in (2, 3, 4):
        return None
    if x.dim() == 4:
        nb, nh, ns = x.shape[:3]
    elif x.dim() == 3 and cos.dim() == 3:  # [b, s, d] with [b, s, r/2]: the first axis is the batch
        (nb, ns), nh = x.shape[:2], 1
    elif x.dim() == 3:  # [n, s, d] with [s, r/2]
        nb, (nh, ns) = 1, x.shape[:2]
    else:
        nb, nh, ns = 1, 1, x.shape[0]
    return nb, nh, ns, int(cos.dim() == 3 and cos.shape[0] != 1)


def _strides(t: torch.Tensor, cos: torch.Tensor) -> tuple[int, int, int]:
    """Element strides of t's [nb, nh, ns] axes, as :func:`_native_geometry` views it (0: no such axis)."""
    stride = t.stride()
    if t.dim() == 4:
        return stride[0], stride[1], stride[2]
    if t.dim() == 3:
        return (stride[0], 0, stride[1]) if cos.dim() == 3 else (0, stride[0], stride[1])
    return 0, 0, stride[0]


def _native(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    out: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int,
    conjugate: bool,
    geometry: tuple[int, ...],
    stream: bool | None = None,
) -> None:
    """Rotate x into out with the C kernel; ``stream``: non-temporal stores (default: for an output of
    :data:`_STREAM_MIN_BYTES` or more that is not x; the kernel keeps plain stores where rows are not
    aligned to cache lines)."""
    nb, nh, ns, batched = geometry
    if nb * nh * ns == 0:
        return
    suffix, tables = _KERNEL_DTYPES[x.dtype]
    table_dtype = cos.dtype if cos.dtype in tables and sin.dtype == cos.dtype else tables[0]
    half = rotary_dim // 2
    cos = cos.to(table_dtype).contiguous()  # [(b,) s, r/2]: read as they are where the kernel can
    sin = sin.to(table_dtype).contiguous()
    threads = torch.get_num_threads() if x.numel() >= _PARALLEL_MIN_ELEMENTS else 1
    if stream is None:
        stream = out.data_ptr() != x.data_ptr() and out.numel() * out.element_size() >= _STREAM_MIN_BYTES
    kernel = getattr(lib, f"posenc_rope_{layout}_{suffix}_{_C_NAMES[table_dtype]}")
    failed = kernel(
        x.data_ptr(),
        out.data_ptr(),
        cos.data_ptr(),
        sin.data_ptr(),
        nb,
        nh,
        ns,
        x.shape[-1],
        half,
        *_strides(x, cos),
        *_strides(out, cos),
        ns * half if batched else 0,
        int(conjugate),
        threads,
        int(stream),
    )
    if failed:  # it wrote nothing
        raise MemoryError(f"the RoPE C kernel could not allocate its cos/sin tables ({threads} threads)")


# --- the torch fallback ---------------------------------------------------------------------------


def _torch_rotate(
    x: torch.Tensor,
    out: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int,
    conjugate: bool,
) -> None:
    """Torch ops only; bfloat16/float16 rotate a float32 copy of the rotated channels, rounded once."""
    if cos.dim() == 3 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, s, r/2]: shared by the heads
    if conjugate:
        sin = -sin
    inplace = out is x
    source, target = x[..., :rotary_dim], out[..., :rotary_dim]  # [..., r]
    if x.dtype in (torch.float32, torch.float64):
        _rotate_rows(source, target, cos, sin, layout, inplace)
    else:
        work = source.to(torch.float32)  # [..., r], a contiguous copy
        _rotate_rows(work, work, cos, sin, layout, inplace=True)
        target.copy_(work)
    if not inplace and rotary_dim < x.shape[-1]:
        out[..., rotary_dim:] = x[..., rotary_dim:]


def _rotate_rows(
    source: torch.Tensor,
    target: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    inplace: bool,
) -> None:
    """target[..., :r] = source[..., :r] rotated (target is source when inplace): a complex multiply
    where the pairs can be viewed as complex numbers, else ``out=`` / in-place multiply-adds."""
    half = source.shape[-1] // 2
    cos, sin = cos.to(source.dtype), sin.to(source.dtype)
    if layout == "interleaved" and _complex_viewable(source, target):
        freqs = torch.complex(cos, sin)  # [..., s, r/2]
        pairs = torch.view_as_complex(source.unflatten(-1, (half, 2)))  # [..., s, r/2]
        if inplace:
            pairs.mul_(freqs)
        else:
            torch.mul(pairs, freqs, out=torch.view_as_complex(target.unflatten(-1, (half, 2))))
        return
    if layout == "half":
        (x1, x2), (o1, o2) = source.chunk(2, dim=-1), target.chunk(2, dim=-1)  # [..., r/2] each
    else:
        (x1, x2), (o1, o2) = (source[..., 0::2], source[..., 1::2]), (target[..., 0::2], target[..., 1::2])
    if inplace:
        first = x1.clone()
        x1.mul_(cos).addcmul_(x2, sin, value=-1)
        x2.mul_(cos).addcmul_(first, sin)
    else:
        torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2).addcmul_(x1, sin)


def _complex_viewable(*tensors: torch.Tensor) -> bool:
    """Whether channel pairs (2k, 2k+1) of each tensor can be viewed as complex numbers."""
    return all(
        t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(st % 2 == 0 for st in t.stride()[:-1])
        for t in tensors
    )


# --- building and loading the C kernel -------------------------------------------------------------


def source() -> str:
    """The C source of the kernel (``rope_cpu.c``, shipped with the package)."""
    return resources.files("posenc.kernels").joinpath(_SOURCE_NAME).read_text(encoding="utf-8")


def _library() -> ctypes.CDLL | None:
    if "reason" in _state:
        return _state["lib"]  # type: ignore[return-value]
    with _lock:
        if "reason" not in _state:
            lib, reason = _build_and_load()
            _state.update(lib=lib, reason=reason)
            if lib is None:
                _log.info("posenc RoPE C kernel not used: %s", reason)
    return _state["lib"]  # type: ignore[return-value]


def _build_and_load() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get("POSENC_NATIVE", "1") == "0":
        return None, "disabled by POSENC_NATIVE=0"
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler found ($CC, cc, gcc, clang)"
    try:
        text = source()
    except OSError as error:
        return None, f"the C source {_SOURCE_NAME} is missing from the installed package: {error}"
    errors, cache = [], _cache_dir()
    for extra in _FLAG_SETS:
        flags = (*_BASE_FLAGS, *extra)
        path = cache / f"rope_cpu_{_cache_key(text, compiler, flags)}.so"
        try:
            if not path.exists():
                _compile(text, compiler, flags, path)
            lib = _load(path)
        except (OSError, subprocess.SubprocessError) as error:
            errors.append(f"{' '.join(extra) or 'plain'}: {str(error).strip()[:200]}")
            continue
        failure = _self_test(lib)
        if failure:
            errors.append(f"{' '.join(extra) or 'plain'}: {failure}")
            continue
        return lib, f"loaded {path} ({compiler} {' '.join(flags)})"
    return None, "the C kernel did not build: " + "; ".join(errors)


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (found := shutil.which(name)):
            return found
    return None


def _cache_dir() -> Path:
    """$POSENC_CACHE_DIR, else ~/.cache/posenc; where neither can be made, a fresh private temporary
    folder (never a shared, predictable one: another user could plant a library there)."""
    root = os.environ.get("POSENC_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "posenc"
    )
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        return Path(root)
    except OSError:
        return Path(tempfile.mkdtemp(prefix="posenc-"))


def _cache_key(text: str, compiler: str, flags: tuple[str, ...]) -> str:
    """Source, compiler, flags and this CPU (a -march=native build must not run on another CPU)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            cpu += next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    parts = (text, os.path.realpath(compiler), *flags, platform.machine(), cpu)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _compile(text: str, compiler: str, flags: tuple[str, ...], path: Path) -> None:
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        source_file = Path(work, _SOURCE_NAME)
        source_file.write_text(text, encoding="utf-8")
        built = Path(work, path.name)
        result = subprocess.run(
            [compiler, *flags, str(source_file), "-o", str(built)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise subprocess.SubprocessError(result.stderr or f"{compiler} exited with {result.returncode}")
        os.replace(built, path)  # atomic: a concurrent process sees the old file or the whole new one


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    pointer, index = ctypes.c_void_p, ctypes.c_int64
    for layout in _LAYOUTS:
        for suffix, tables in _KERNEL_DTYPES.values():
            for table in tables:
                kernel = getattr(lib, f"posenc_rope_{layout}_{suffix}_{_C_NAMES[table]}")
                kernel.argtypes = [pointer] * 4 + [index] * 12 + [ctypes.c_int] * 3
                kernel.restype = ctypes.c_int
    return lib


def _recipe(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
) -> torch.Tensor:
    """The reference products and sums, one torch op each (nothing fused), for the self-test."""
    rotary, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        x1, x2 = rotary.chunk(2, dim=-1)
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = rotary[..., 0::2], rotary[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1)


def _self_test(lib: ctypes.CDLL) -> str:
    """Empty if the loaded kernel reproduces the reference recipe on small inputs, both ways round,
    else what differed (float32: exactly; bfloat16: the float32 rotation rounded once): rows of 108
    channels of which 102 rotate (each SIMD width, a tail, a rest), and a [b, s, h, d] projection
    viewed as [b, h, s, d] (heads innermost) written with and without non-temporal stores."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(2, 3, 45, 108, generator=generator)  # [b, h, s, d]: a whole and a partial block
    rows[0, 0, 0] *= 1e-39  # results below float32's normal range: rounded, not flushed to zero
    projected = torch.randn(2, 45, 3, 128, generator=generator).transpose(1, 2)  # [b, h, s, d], strided
    angles = torch.rand(45, 64, generator=generator, dtype=torch.float64) * 6.3
    for x, rotary in ((rows.to(torch.bfloat16), 102), (projected.to(torch.bfloat16), 128)):
        cos64, sin64 = angles[:, : rotary // 2].cos(), angles[:, : rotary // 2].sin()
        cos, sin = cos64.to(torch.float32), sin64.to(torch.float32)  # the tables the kernel reads
        geometry = _native_geometry(x, x, cos)
        for layout, conjugate, stream in itertools.product(_LAYOUTS, (False, True), (False, True)):
            expected = _recipe(x.to(torch.float32), cos, -sin if conjugate else sin, layout, rotary)
            for t, want in ((x.to(torch.float32), expected), (x, expected.to(torch.bfloat16))):
                for tables in ((cos, sin), (cos64, sin64)):  # float64 tables: rounded once to float32
                    got = torch.empty_like(t)
                    _native(lib, t, got, *tables, layout, rotary, conjugate, geometry, stream)  # type: ignore[arg-type]
                    if not torch.equal(got, want):
                        return (
                            f"self-test failed for {t.dtype} of strides {t.stride()} with {tables[0].dtype} "
                            f"tables, layout {layout!r}, conjugate={conjugate}, stream={stream}"
                        )
    return ""


# --- admission: what this kernel takes -----------------------------------------------------------


def refusal(items: list[Item]) -> Refusal | None:
    """Why this C kernel (``native``) cannot take these tensors, or None: the dispatcher falls back to
    the reference (``backend="auto"``) or raises it (``backend="native"``)."""
    for name, x, cos, sin in items:
        if x.device.type != "cpu":
            return ValueError, (
                f"the native kernel runs CPU tensors, got {name} on {x.device}; backend='auto' picks "
                "the kernel for the device"
            )
        if x.dim() not in (2, 3, 4):
            return ValueError, (
                f"the native kernel takes {name} as [b, h, s, d], [b, s, d], [n, s, d] or [s, d], got "
                f"shape {tuple(x.shape)}"
            )
        for table_name, table in (("cos", cos), ("sin", sin)):
            if needs_grad(table):
                return ValueError, (
                    f"the native kernel does not differentiate {table_name}; use backend='eager' "
                    "(backend='auto' does so by itself)"
                )
        if cos.dim() == 4:
            return ValueError, PER_HEAD_TABLES
        if enlarges(x, cos):
            return enlarge_refusal(name, x, cos, "the native kernel does not broadcast; its tables")
    return None
