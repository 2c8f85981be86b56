"""Fast CPU RoPE for q and k: one read and one write per element, in a C kernel compiled on first use.

:func:`apply_rope_qk` returns what :func:`posenc.functional.apply_rope` returns for q and for k.
Eager ``apply_rope`` makes several passes over memory (slices, products, ``cat``); the kernel here
rotates each row in a single pass, or in place. It is compiled by the system C compiler (``$CC``,
``cc``, ``gcc`` or ``clang``) the first time it is needed, about 0.3 s, and cached on disk
(``$POSENC_CACHE_DIR``, default ``~/.cache/posenc``), keyed by source, compiler, flags and CPU. Where no
compiler works, or ``POSENC_NATIVE=0``, an eager torch path runs instead: a complex multiply for
interleaved pairs, ``out=`` and in-place multiply-adds for half-split ones.

Numerics of the C kernel:

- float32 and float64: the same products and sums in the same order as ``apply_rope``, built with
  ``-ffp-contract=off`` (no fused multiply-add), so the results are bit-identical.
- bfloat16: computed in float32 from float32 cos/sin and rounded once to bfloat16 (nearest even,
  exactly as ``.to(torch.bfloat16)`` rounds), where ``apply_rope`` rounds each bfloat16 product: more
  accurate, and within one bfloat16 unit of it. The eager fallback does the same (and so for float16).

Other dtypes (float16), other devices, inputs that need autograd, and torch.compile tracing take the
eager paths (``apply_rope`` itself for autograd and tracing).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from posenc._validation import check_choice
from posenc.functional.rope import LAYOUTS, _check_rotation, apply_rope

_log = logging.getLogger(__name__)

#: ``auto``: the C kernel where it applies, else eager; ``native``: the C kernel or an error; ``eager``: torch ops.
BACKENDS = ("auto", "native", "eager")

#: Below this many elements per tensor the kernel runs on one thread (thread start-up would dominate).
_PARALLEL_MIN_ELEMENTS = 1 << 15

# One function per (layout, dtype): rotate rows [b, h, s, :d] of x into out (out may be x).
# Strides are in elements; cos/sin rows are contiguous [nb or 1, ns, n], cb = batch stride (0: shared).
_SOURCE = r"""
#include <stdint.h>
#include <string.h>

static inline float bf16_load(const uint16_t *p) {
    uint32_t u = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t bf16_round(float f) { /* nearest even, as torch rounds; NaN -> 0x7FC0 */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? 0x7FC0u : rounded);
}

#define ROW_FLOAT(T, SUFFIX)                                                                       \
    static inline void row_half_##SUFFIX(const T *x, T *o, const T *c, const T *s, int64_t n) {   \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[k], x2 = x[k + n];                                                            \
            o[k] = x1 * c[k] - x2 * s[k];                                                          \
            o[k + n] = x2 * c[k] + x1 * s[k];                                                      \
        }                                                                                          \
    }                                                                                              \
    static inline void row_interleaved_##SUFFIX(const T *x, T *o, const T *c, const T *s,         \
                                                int64_t n) {                                       \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[2 * k], x2 = x[2 * k + 1];                                                    \
            o[2 * k] = x1 * c[k] - x2 * s[k];                                                      \
            o[2 * k + 1] = x2 * c[k] + x1 * s[k];                                                  \
        }                                                                                          \
    }

ROW_FLOAT(float, f32)
ROW_FLOAT(double, f64)

#if defined(__AVX512F__)
#include <immintrin.h>
/* 16 lanes at a time, rounding exactly as bf16_round does. */
static inline __m512 bf16x16_load(const uint16_t *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline __m512i bf16x16_round(__m512 v) { /* the bfloat16 bits in the low half of each lane */
    __m512i u = _mm512_castps_si512(v);
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)),
                                    _mm512_set1_epi32(0x7FFF));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}
#define BF16_SIMD 1
#else
#define BF16_SIMD 0
#endif

static inline void row_half_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s,
                                 int64_t n) {
    int64_t k = 0;
#if BF16_SIMD
    for (; k + 16 <= n; k += 16) {
        __m512 ck = _mm512_loadu_ps(c + k), sk = _mm512_loadu_ps(s + k);
        __m512 x1 = bf16x16_load(x + k), x2 = bf16x16_load(x + k + n);
        __m512i y1 = bf16x16_round(_mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk)));
        __m512i y2 = bf16x16_round(_mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk)));
        _mm256_storeu_si256((__m256i *)(o + k), _mm512_cvtepi32_epi16(y1));
        _mm256_storeu_si256((__m256i *)(o + k + n), _mm512_cvtepi32_epi16(y2));
    }
#endif
#pragma GCC ivdep
    for (; k < n; k++) {
        float x1 = bf16_load(x + k), x2 = bf16_load(x + k + n);
        o[k] = bf16_round(x1 * c[k] - x2 * s[k]);
        o[k + n] = bf16_round(x2 * c[k] + x1 * s[k]);
    }
}

static inline void row_interleaved_bf16(const uint16_t *x, uint16_t *o, const float *c,
                                        const float *s, int64_t n) {
    int64_t k = 0;
#if BF16_SIMD
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    for (; k + 16 <= n; k += 16) { /* 16 pairs, one 32-bit word each: channel 2k in the low half */
        __m512i pairs = _mm512_loadu_si512((const void *)(x + 2 * k));
        __m512 x1 = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
        __m512 x2 = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
        __m512 ck = _mm512_loadu_ps(c + k), sk = _mm512_loadu_ps(s + k);
        __m512i y1 = bf16x16_round(_mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk)));
        __m512i y2 = bf16x16_round(_mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk)));
        _mm512_storeu_si512((void *)(o + 2 * k), _mm512_or_si512(y1, _mm512_slli_epi32(y2, 16)));
    }
#endif
#pragma GCC ivdep
    for (; k < n; k++) {
        float x1 = bf16_load(x + 2 * k), x2 = bf16_load(x + 2 * k + 1);
        o[2 * k] = bf16_round(x1 * c[k] - x2 * s[k]);
        o[2 * k + 1] = bf16_round(x2 * c[k] + x1 * s[k]);
    }
}

#define KERNEL(NAME, T, C)                                                                         \
    void posenc_rope_##NAME(const T *x, T *out, const C *cos, const C *sin, int64_t nb,           \
                            int64_t nh, int64_t ns, int64_t d, int64_t n, int64_t xb, int64_t xh,  \
                            int64_t xs, int64_t ob, int64_t oh, int64_t os, int64_t cb,            \
                            int threads) {                                                         \
        _Pragma("omp parallel for collapse(3) schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t b = 0; b < nb; b++)                                                           \
            for (int64_t h = 0; h < nh; h++)                                                       \
                for (int64_t s = 0; s < ns; s++) {                                                 \
                    const T *xr = x + b * xb + h * xh + s * xs;                                    \
                    T *o = out + b * ob + h * oh + s * os;                                         \
                    row_##NAME(xr, o, cos + b * cb + s * n, sin + b * cb + s * n, n);              \
                    if (o != xr && d > 2 * n)                                                      \
                        memcpy(o + 2 * n, xr + 2 * n, (size_t)(d - 2 * n) * sizeof(T));          \
                }                                                                                  \
    }

KERNEL(half_f32, float, float)
KERNEL(interleaved_f32, float, float)
KERNEL(half_f64, double, double)
KERNEL(interleaved_f64, double, double)
KERNEL(half_bf16, uint16_t, float)
KERNEL(interleaved_bf16, uint16_t, float)
"""

#: x dtype -> (C name suffix, dtype the kernel takes cos/sin in).
_KERNEL_DTYPES = {
    torch.float32: ("f32", torch.float32),
    torch.float64: ("f64", torch.float64),
    torch.bfloat16: ("bf16", torch.float32),
}
_BASE_FLAGS = ("-O3", "-ffp-contract=off", "-fPIC", "-shared")
#: Tried in order; the first that compiles wins (no OpenMP: one thread; no -march=native: generic SIMD).
_FLAG_SETS = (("-fopenmp", "-march=native"), ("-fopenmp",), ("-march=native",), ())

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": ctypes.CDLL | None, "reason": why it is None


def native_available() -> bool:
    """Whether the C kernel is built and loaded (building it now if needed; False where it cannot be)."""
    return _library() is not None


def native_status() -> str:
    """One line saying where the C kernel was loaded from, or why it is not used."""
    _library()
    return str(_state["reason"])


def apply_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k by the angles whose cos/sin are given: ``(apply_rope(q, …), apply_rope(k, …))``.

    Args:
        q, k: ``[b, h, s, d]`` (or ``[..., s, d]``); k may have fewer heads than q.
        cos, sin: ``[s, r/2]`` or ``[b, s, r/2]`` from :func:`posenc.functional.rope_cos_sin`.
        layout: ``"half"`` pairs (k, k + r/2); ``"interleaved"`` pairs (2k, 2k+1).
        rotary_dim: rotated channels r (default: all d); the other d − r pass through.
        inplace: rotate q and k in their own memory and return them (no new tensors).
        backend: ``"auto"`` (C kernel where it applies, eager torch otherwise), ``"native"`` (C kernel
            or RuntimeError) or ``"eager"``.

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape and dtype.

    Raises:
        ValueError: the errors of ``apply_rope`` (layout, rotary_dim, cos/sin shapes), an unknown
            backend; with ``inplace``, cos/sin whose batch would enlarge q or k, or an expanded q or k.
            Nothing is rotated when a ValueError is raised.
        RuntimeError: ``backend="native"`` where the C kernel cannot be built or does not apply.
    """
    check_choice("backend", backend, BACKENDS)
    rotary = [_checked(x, name, cos, sin, layout, rotary_dim, inplace) for name, x in (("q", q), ("k", k))]
    return (
        _rotate(q, cos, sin, layout, rotary[0], inplace, backend),
        _rotate(k, cos, sin, layout, rotary[1], inplace, backend),
    )


def apply_rope_cpu(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """One tensor through the fast path: what :func:`posenc.functional.apply_rope` returns, in one pass.

    Same arguments as :func:`apply_rope_qk` for a single ``x``; autograd, torch.compile tracing and
    non-CPU tensors take ``apply_rope`` itself.
    """
    check_choice("backend", backend, BACKENDS)
    rotary = _checked(x, "x", cos, sin, layout, rotary_dim, inplace)
    return _rotate(x, cos, sin, layout, rotary, inplace, backend)


def _checked(x, name, cos, sin, layout, rotary_dim, inplace) -> int:
    """apply_rope's checks, plus what rotating in place needs; the rotary width. Raises before any rotation."""
    rotary = _check_rotation(x, cos, sin, layout, rotary_dim)
    if inplace and _enlarges(x, cos):
        raise ValueError(
            f"inplace needs cos/sin that broadcast to {name}'s shape {tuple(x.shape)}, got cos of shape {tuple(cos.shape)}"
        )
    if inplace and _overlaps(x):
        raise ValueError(
            f"inplace needs {name} to own its memory, got an expanded view (shape {tuple(x.shape)}, strides {x.stride()})"
        )
    return rotary


def _enlarges(x: torch.Tensor, cos: torch.Tensor) -> bool:
    """Whether apply_rope's result would not have x's shape: cos/sin ``[b, s, r/2]`` with a batch b
    that x lacks (x ``[s, d]``, or x's batch axis 1 or another size; the latter makes apply_rope raise)."""
    if cos.dim() == 2:
        return False
    if x.dim() == 2:
        return True
    batch = x.shape[0] if x.dim() == 4 else x.shape[-3]  # the axis cos's batch lines up with
    return cos.shape[0] not in (1, batch)


def _rotate(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int,
    inplace: bool,
    backend: str,
) -> torch.Tensor:
    tracing = torch.compiler.is_compiling()
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)
    if tracing or needs_grad or _enlarges(x, cos):
        if backend == "native":
            why = "torch.compile tracing" if tracing else "autograd" if needs_grad else "cos/sin enlarge x"
            raise RuntimeError(f"the C kernel does not apply here ({why})")
        rotated = apply_rope(x, cos, sin, layout=layout, rotary_dim=rotary_dim, backend="reference")
        return x.copy_(rotated) if inplace else rotated
    if backend != "eager":
        geometry = _native_geometry(x, cos, inplace)
        lib = _library() if geometry is not None else None
        if lib is not None:
            return _native(lib, x, cos, sin, layout, rotary_dim, inplace, geometry)
        if backend == "native":
            why = "unsupported input" if geometry is None else str(_state["reason"])
            raise RuntimeError(
                f"the C kernel does not apply to x {x.dtype} {tuple(x.shape)} strides {x.stride()} "
                f"on {x.device}: {why}"
            )
    return _eager(x, cos, sin, layout, rotary_dim, inplace)


def _native_geometry(x: torch.Tensor, cos: torch.Tensor, inplace: bool) -> tuple[int, ...] | None:
    """(nb, nh, ns, cos batched): x viewed as [nb, nh, ns, d]; None where the kernel does not apply."""
    if x.dtype not in _KERNEL_DTYPES or x.device.type != "cpu" or cos.device.type != "cpu":
        return None
    if x.stride(-1) != 1 or x.dim() not in (2, 3, 4):
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


def _overlaps(x: torch.Tensor) -> bool:
    """Whether two indices of x may address the same memory (an expanded view): unsafe to write in place."""
    extent = 1  # elements spanned by the dimensions of smaller stride
    for stride, size in sorted((st, s) for s, st in zip(x.shape, x.stride(), strict=True) if s > 1):
        if stride < extent:
            return True
        extent += (size - 1) * stride
    return False


def _native(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int,
    inplace: bool,
    geometry: tuple[int, ...],
) -> torch.Tensor:
    nb, nh, ns, batched = geometry
    suffix, angle_dtype = _KERNEL_DTYPES[x.dtype]
    half = rotary_dim // 2
    cos = cos.to(angle_dtype).contiguous()  # [(b,) s, r/2]
    sin = sin.to(angle_dtype).contiguous()
    out = x if inplace else torch.empty_like(x)
    width = x.shape[-1]
    threads = torch.get_num_threads() if x.numel() >= _PARALLEL_MIN_ELEMENTS else 1
    kernel = getattr(lib, f"posenc_rope_{layout}_{suffix}")
    kernel(
        x.data_ptr(),
        out.data_ptr(),
        cos.data_ptr(),
        sin.data_ptr(),
        nb,
        nh,
        ns,
        width,
        half,
        *_strides(x, cos),
        *_strides(out, cos),
        ns * half if batched else 0,
        threads,
    )
    return out


def _eager(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int, inplace: bool
) -> torch.Tensor:
    """Torch ops only; bfloat16/float16 rotate a float32 copy of the rotated channels, rounded once."""
    if cos.dim() == 3 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, s, r/2]: shared by the heads
    out = x if inplace else torch.empty_like(x)
    source, target = x[..., :rotary_dim], out[..., :rotary_dim]  # [..., r]
    if x.dtype in (torch.float32, torch.float64):
        _rotate_eager(source, target, cos, sin, layout, inplace)
    else:
        work = source.to(torch.float32)  # [..., r], a contiguous copy
        _rotate_eager(work, work, cos, sin, layout, inplace=True)
        target.copy_(work)
    if not inplace and rotary_dim < x.shape[-1]:
        out[..., rotary_dim:] = x[..., rotary_dim:]
    return out


def _rotate_eager(
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
    errors, cache = [], _cache_dir()
    for extra in _FLAG_SETS:
        flags = (*_BASE_FLAGS, *extra)
        path = cache / f"rope_cpu_{_cache_key(compiler, flags)}.so"
        try:
            if not path.exists():
                _compile(compiler, flags, path)
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


def _cache_key(compiler: str, flags: tuple[str, ...]) -> str:
    """Source, compiler, flags and this CPU (a -march=native build must not run on another CPU)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            cpu += next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    parts = (_SOURCE, os.path.realpath(compiler), *flags, platform.machine(), cpu)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _compile(compiler: str, flags: tuple[str, ...], path: Path) -> None:
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        source = Path(work, "rope_cpu.c")
        source.write_text(_SOURCE)
        built = Path(work, path.name)
        result = subprocess.run(
            [compiler, *flags, str(source), "-o", str(built)], capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise subprocess.SubprocessError(result.stderr or f"{compiler} exited with {result.returncode}")
        os.replace(built, path)  # atomic: a concurrent process sees the old file or the whole new one


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    pointer, index = ctypes.c_void_p, ctypes.c_int64
    for layout in ("half", "interleaved"):
        for suffix, _ in _KERNEL_DTYPES.values():
            kernel = getattr(lib, f"posenc_rope_{layout}_{suffix}")
            kernel.argtypes = [pointer] * 4 + [index] * 12 + [ctypes.c_int]
            kernel.restype = None
    return lib


def _self_test(lib: ctypes.CDLL) -> str:
    """Empty if the loaded kernel reproduces apply_rope on a small input, else what differed
    (float32: exactly; bfloat16: the float32 rotation rounded once)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 40, generator=generator).to(torch.bfloat16)  # [b, h, s, d]
    angles = torch.rand(5, 17, generator=generator, dtype=torch.float64) * 6.3
    cos, sin = angles.cos().float(), angles.sin().float()  # rotary_dim 34 of 40: SIMD block, tail, rest
    geometry = _native_geometry(x, cos, inplace=False)
    for layout in LAYOUTS:
        expected = apply_rope(x.float(), cos, sin, layout=layout, rotary_dim=34, backend="reference")
        for t, want in ((x.float(), expected), (x, expected.to(torch.bfloat16))):
            if not torch.equal(_native(lib, t, cos, sin, layout, 34, False, geometry), want):  # type: ignore[arg-type]
                return f"self-test failed for {t.dtype}, layout {layout!r}"
    return ""
