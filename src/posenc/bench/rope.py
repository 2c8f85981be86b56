"""`posenc bench rope`: RoPE on q and k on CPU, posenc against the usual recipes and a clone.

For every case (shape, dtype, layout) each candidate's output is first checked against posenc's
``apply_rope`` (a fast wrong recipe fails the run instead of winning it). Then all candidates are timed
in alternating rounds on the same q and k, each starting from the same cache state (:data:`CACHES`),
and reported as a ratio to cloning q and k, the memory floor of any out-of-place recipe.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable, Sequence

import torch

from posenc.bench.harness import time_alternating
from posenc.functional.rope import LAYOUTS, apply_rope, rope_cos_sin, rope_inv_freq
from posenc.kernels.rope_cpu import apply_rope_qk, native_available, native_status

#: (b, h, s, d) of q and k.
SHAPES: tuple[tuple[int, int, int, int], ...] = ((1, 16, 2048, 128), (4, 32, 1024, 64))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CLONE = "clone of q and k (memory floor)"
#: Largest |candidate − apply_rope| accepted, as a fraction of max |apply_rope| (bf16: a few units).
AGREEMENT = {torch.float32: 1e-5, torch.bfloat16: 2**-6}
#: The project's goal for posenc's fast path, in multiples of the clone.
GOAL_VS_CLONE = 1.3
#: The cache state each candidate starts from (a reset step before it runs, timed apart and dropped).
CACHES = {
    "cold": "q, k and the output memory evicted (a 128 MiB buffer read first): from DRAM",
    "warm": "q and k read just before (as right after the projection that made them)",
}
_RESET = "\0reset before "
_FLUSH_ELEMENTS = 32 << 20  # float32: 128 MiB, four times this machine's 32 MiB L3


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (−x2, x1) over the two halves of the last axis."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x_2k, x_2k+1) -> (−x_2k+1, x_2k) for every channel pair (GPT-J's interleaved form)."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def hf_style(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The usual eager recipe: x·cos + rotate(x)·sin with full-width ``[s, d]`` cos/sin in x's dtype."""
    rotate = rotate_half if layout == "half" else rotate_every_two
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def full_width(cos: torch.Tensor, sin: torch.Tensor, layout: str, dtype: torch.dtype) -> tuple:
    """``[s, r/2]`` cos/sin duplicated to ``[s, r]`` as the HF-style recipe takes them, in ``dtype``."""
    if layout == "half":
        return torch.cat((cos, cos), dim=-1).to(dtype), torch.cat((sin, sin), dim=-1).to(dtype)
    return cos.repeat_interleave(2, dim=-1).to(dtype), sin.repeat_interleave(2, dim=-1).to(dtype)


def complex_multiply(
    q: torch.Tensor, k: torch.Tensor, freqs_cis: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta's LLaMA recipe (interleaved pairs): complex view of float32 x times e^{iθ}, cast back."""

    def rotate(x: torch.Tensor) -> torch.Tensor:
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # [..., s, d/2]
        return torch.view_as_real(pairs * freqs_cis).flatten(-2).type_as(x)

    return rotate(q), rotate(k)


def steady_malloc() -> bool:
    """Make glibc reuse freed blocks (mmap and trim thresholds at 1 GiB) instead of fresh pages.

    With glibc's defaults a new 16–32 MiB tensor is often freshly mapped memory, and its page faults
    (about 1 µs per 4 KiB page here) then dominate a clone; a caching allocator (jemalloc,
    tcmalloc) avoids them, and so does this. Process-wide; returns False where it is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 1 << 30))


def check_agreement(
    name: str, got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], case: str
) -> float:
    """Largest |got − expected| over q and k; AssertionError beyond the dtype's tolerance."""
    deviation = max(float((g.double() - e.double()).abs().max()) for g, e in zip(got, expected, strict=True))
    scale = max(float(e.double().abs().max()) for e in expected)
    bound = AGREEMENT[expected[0].dtype] * max(scale, 1.0)
    if not deviation <= bound:  # also catches NaN
        raise AssertionError(
            f"{name} disagrees with posenc apply_rope by {deviation:.3g} > {bound:.3g} ({case})"
        )
    return deviation


def _read(tensors: Sequence[torch.Tensor]) -> None:
    """Bring tensors into the caches as far as they fit (reading leaves clean lines: nothing to write back)."""
    for t in tensors:
        t.sum()


def _fresh_compile(fn: Callable) -> Callable:
    """torch.compile for one shape and dtype (a later case recompiles; torch._dynamo.reset runs between)."""
    return torch.compile(fn, fullgraph=True, dynamic=False)


def _posenc_pair(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return apply_rope(q, cos, sin, layout=layout), apply_rope(k, cos, sin, layout=layout)


def _case(
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    layout: str,
    rounds: int,
    compile: bool,
    caches: Sequence[str],
    flush: torch.Tensor,
) -> list[dict]:
    """One entry per cache state: every candidate timed on the same q and k, after a check of its output."""
    b, h, s, d = shape
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(shape, generator=generator).to(dtype)  # [b, h, s, d]
    k = torch.randn(shape, generator=generator).to(dtype)
    inv_freq, _ = rope_inv_freq(d)
    cos, sin = rope_cos_sin(s, inv_freq)  # [s, d/2] float32
    case = f"{shape} {str(dtype).removeprefix('torch.')} {layout}"
    expected = _posenc_pair(q, k, cos, sin, layout)
    cos64, sin64 = rope_cos_sin(s, inv_freq, dtype=torch.float64)
    exact = [apply_rope(x.double(), cos64, sin64, layout=layout) for x in (q, k)]
    cos_full, sin_full = full_width(cos, sin, layout, dtype)  # [s, d] in q's dtype
    q_in_place, k_in_place = q.clone(), k.clone()

    # name -> (run, the tensors it reads)
    candidates: dict[str, tuple[Callable[[], object], tuple[torch.Tensor, ...]]] = {
        CLONE: (lambda: (q.clone(), k.clone()), (q, k)),
        "posenc apply_rope": (lambda: _posenc_pair(q, k, cos, sin, layout), (q, k)),
        "posenc apply_rope_qk": (lambda: apply_rope_qk(q, k, cos, sin, layout=layout), (q, k)),
        "posenc apply_rope_qk, in place": (
            lambda: apply_rope_qk(q_in_place, k_in_place, cos, sin, layout=layout, inplace=True),
            (q_in_place, k_in_place),
        ),
        "posenc apply_rope_qk, eager fallback": (
            lambda: apply_rope_qk(q, k, cos, sin, layout=layout, backend="eager"),
            (q, k),
        ),
        "HF-style eager": (lambda: hf_style(q, k, cos_full, sin_full, layout), (q, k)),
    }
    skipped: dict[str, str] = {}
    if layout == "interleaved":
        freqs_cis = torch.complex(cos, sin)  # [s, d/2] complex64: e^{iθ}
        candidates["complex multiply (Meta LLaMA)"] = (lambda: complex_multiply(q, k, freqs_cis), (q, k))
    else:
        skipped["complex multiply (Meta LLaMA)"] = "pairs (2k, 2k+1) only"
    if compile:
        torch._dynamo.reset()  # every case compiles afresh; the recompile limit is never reached
        compiled = {
            "torch.compile(posenc apply_rope)": (_fresh_compile(_posenc_pair), (q, k, cos, sin, layout)),
            "torch.compile(HF-style)": (_fresh_compile(hf_style), (q, k, cos_full, sin_full, layout)),
        }
        for name, (fn, args) in compiled.items():
            try:
                fn(*args)  # compiles now, before any timing
            except Exception as error:  # no C++ compiler, unsupported op, …: report, do not time
                skipped[name] = f"torch.compile failed: {type(error).__name__}: {str(error)[:120]}"
                continue
            candidates[name] = (lambda fn=fn, args=args: fn(*args), (q, k))
    else:
        skipped["torch.compile(posenc apply_rope)"] = skipped["torch.compile(HF-style)"] = "not requested"

    deviations: dict[str, float | None] = {CLONE: None}  # the clone does not rotate
    errors: dict[str, float | None] = {CLONE: None}
    for name, (candidate, _) in candidates.items():
        if name == CLONE:
            continue
        q_in_place.copy_(q), k_in_place.copy_(k)
        got = candidate()
        deviations[name] = check_agreement(name, got, expected, case)
        errors[name] = max(float((g.double() - e).abs().max()) for g, e in zip(got, exact, strict=True))

    entries = []
    for cache in caches:
        timed: dict[str, Callable[[], object]] = {}
        for name, (candidate, inputs) in candidates.items():
            read_first = (flush,) if cache == "cold" else inputs
            timed[_RESET + name] = lambda read_first=read_first: _read(read_first)
            timed[name] = candidate
        timings = {
            name: t
            for name, t in time_alternating(timed, rounds=rounds).items()
            if not name.startswith(_RESET)
        }
        floor = timings[CLONE].median_ms
        entries.append(
            {
                "shape": list(shape),
                "dtype": str(dtype).removeprefix("torch."),
                "layout": layout,
                "cache": cache,
                "timings": [
                    {
                        **t.as_dict(),
                        "vs_clone": t.median_ms / floor,
                        "max_abs_diff_vs_apply_rope": deviations[t.name],
                        "max_abs_error_vs_float64": errors[t.name],
                    }
                    for t in timings.values()
                ],
                "not_timed": skipped,
            }
        )
    return entries


def run(
    shapes: Sequence[tuple[int, int, int, int]] | None = None,
    dtypes: Sequence[str] = tuple(DTYPES),
    layouts: Sequence[str] = LAYOUTS,
    rounds: int = 41,
    compile: bool = True,
    reuse_memory: bool = True,
    caches: Sequence[str] = tuple(CACHES),
) -> dict:
    """Timings of every candidate for every (shape, dtype, layout); JSON-ready.

    Args:
        shapes: (b, h, s, d) of q and k (default :data:`SHAPES`).
        rounds: alternating rounds per case (after 2 warm-up rounds).
        compile: include the torch.compile candidates (each compiled before timing).
        reuse_memory: call :func:`steady_malloc` first (process-wide; see there).
        caches: the cache states to time from, keys of :data:`CACHES`.
    """
    shapes = SHAPES if shapes is None else shapes
    for name in dtypes:
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {name!r}")
    for name in caches:
        if name not in CACHES:
            raise ValueError(f"cache must be one of {', '.join(CACHES)}; got {name!r}")
    malloc = (
        "glibc thresholds raised (freed blocks reused)" if reuse_memory and steady_malloc() else "default"
    )
    flush = torch.ones(_FLUSH_ELEMENTS if "cold" in caches else 0)  # read to evict q, k and outputs
    cases = [
        entry
        for shape in shapes
        for dtype in dtypes
        for layout in layouts
        for entry in _case(tuple(shape), DTYPES[dtype], layout, rounds, compile, caches, flush)
    ]
    goal = {}
    for case in cases:
        ratios = {t["name"]: t["vs_clone"] for t in case["timings"]}
        key = f"{tuple(case['shape'])} {case['dtype']} {case['layout']}, {case['cache']} cache"
        goal[key] = {
            "out_of_place": ratios["posenc apply_rope_qk"],
            "in_place": ratios["posenc apply_rope_qk, in place"],
            "met": ratios["posenc apply_rope_qk"] <= GOAL_VS_CLONE,
        }
    return {
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "rounds": rounds,
        "malloc": malloc,
        "caches": {name: CACHES[name] for name in caches},
        "native_kernel": native_status() if native_available() else f"not used: {native_status()}",
        "goal_vs_clone": GOAL_VS_CLONE,
        "goal": goal,
        "cases": cases,
    }
