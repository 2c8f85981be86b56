"""`posenc bench rope`: RoPE on q and k, posenc against the usual recipes and a copy of the same bytes.

CPU (:func:`run`): for every case (shape, dtype, layout) each candidate's output is first checked
against posenc's reference ``apply_rope`` (a fast wrong recipe fails the run instead of winning it).
Then all candidates are timed in alternating rounds on the same q and k, each starting from the same
cache state (:data:`CACHES`), and reported as a ratio to cloning q and k, the memory floor of any
out-of-place recipe. Training (:data:`TRAINING`): the forward and backward pass of rotating q and k
as :meth:`posenc.encodings.rope.RotaryEncoding.rotate` does (k with its own cos/sin), the gradients
checked against float64, timed in alternating rounds against the floor (cloning q and k, then their
gradients) and against the reference recipe under autograd (``backend="eager"``).

GPU (:func:`run_cuda`, ``--device cuda``): the Triton kernel of :mod:`posenc.kernels.rope_triton`
against HF's eager recipe, torch.compile of it and liger-kernel (when installed), forward and
backward, for the shapes of :data:`CUDA_SHAPES` in bfloat16, float16 and float32. Each candidate is
checked against float64 first, then timed with CUDA events in alternating rounds, the L2 cache
flushed before every call (timed apart). Reported: effective bandwidth (bytes read and written /
time) against a measured device-to-device copy of the same bytes, the ratio to each peer, and the
peak extra memory of one call (``torch.cuda.max_memory_allocated`` above what was allocated before).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence

import torch

from posenc.bench.harness import (  # noqa: F401  (also importable from here, as before)
    CUDA_MISSING,
    Timing,
    peak_extra_mib,
    require_cuda,
    steady_malloc,
    time_alternating,
    time_on_device,
)
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.rope_axes import qwen2_vl_sections
from posenc.functional.coordinates import grid_positions
from posenc.functional.rope import LAYOUTS, apply_rope, apply_rope_qk, rope_cos_sin, rope_inv_freq
from posenc.kernels.rope_cpu import fallback_rope, native_available, native_status

#: (b, h, s, d) of q and k.
SHAPES: tuple[tuple[int, int, int, int], ...] = ((1, 16, 2048, 128), (4, 32, 1024, 64))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CLONE = "clone of q and k (memory floor)"
EAGER = "posenc apply_rope_qk, eager (the reference)"
NATIVE = "posenc apply_rope_qk"
ROTARY = "posenc RotaryEncoding.rotate"
#: The module on positions of one axis and on a grid (axial, M-RoPE): axes change only the cos/sin table.
ROTARY_AXIAL = "posenc RotaryEncoding.rotate, axial (2 axes)"
ROTARY_MROPE = "posenc RotaryEncoding.rotate, M-RoPE (t, h, w)"
#: The module on q and k as posenc's attention passes them: views [b, h, s, d] of a [b, s, h·d] projection.
ROTARY_PROJECTED = "posenc RotaryEncoding.rotate, q/k viewed from [b, s, h·d]"
#: Training candidates: forward and backward of rotating q and k (CLONE: q and k, then their gradients).
TRAINING = {
    CLONE: "clone of q and k, then of their gradients: the floor of any out-of-place forward and backward",
    NATIVE: "backend auto: the C kernel forward, and backward (the gradient rotated by −θ)",
    EAGER: "backend='eager': the reference recipe under autograd",
    ROTARY: "the module itself, its cos/sin from its float64 cache",
    ROTARY_PROJECTED: "the module on q and k viewed from [b, s, h·d] projections (transposed, not "
    "contiguous), the gradients taken for the projections",
}
#: Largest |candidate − apply_rope| accepted, as a fraction of max |apply_rope| (bf16: a few units).
AGREEMENT = {torch.float32: 1e-5, torch.bfloat16: 2**-6}
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
    """The functional reference recipe on q and on k (``apply_rope(..., backend="eager")``)."""
    return (
        apply_rope(q, cos, sin, layout=layout, backend="eager"),
        apply_rope(k, cos, sin, layout=layout, backend="eager"),
    )


def _fallback_pair(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The native backend's torch fallback (what runs where no C compiler works) on q and on k."""
    rotary = q.shape[-1]
    return (
        fallback_rope(q, cos, sin, layout=layout, rotary_dim=rotary),
        fallback_rope(k, cos, sin, layout=layout, rotary_dim=rotary),
    )


#: name -> (a call computing RoPE on q and k, the tensors it reads)
Candidates = dict[str, tuple[Callable[[], object], tuple[torch.Tensor, ...]]]


def _compiled_candidates(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str
) -> tuple[Candidates, dict[str, str]]:
    """torch.compile of apply_rope and of the HF-style recipe, compiled now (before any timing);
    the reason for each that failed to compile."""
    cos_full, sin_full = full_width(cos, sin, layout, q.dtype)
    torch._dynamo.reset()  # every case compiles afresh; the recompile limit is never reached
    compiled = {
        "torch.compile(posenc apply_rope)": (_fresh_compile(_posenc_pair), (q, k, cos, sin, layout)),
        "torch.compile(HF-style)": (_fresh_compile(hf_style), (q, k, cos_full, sin_full, layout)),
    }
    candidates: Candidates = {}
    skipped: dict[str, str] = {}
    for name, (fn, args) in compiled.items():
        try:
            fn(*args)
        except Exception as error:  # no C++ compiler, unsupported op, …: report, do not time
            skipped[name] = f"torch.compile failed: {type(error).__name__}: {str(error)[:120]}"
            continue
        candidates[name] = (lambda fn=fn, args=args: fn(*args), (q, k))
    return candidates, skipped


def _cpu_candidates(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, compile: bool
) -> tuple[Candidates, dict[str, str], tuple[torch.Tensor, torch.Tensor]]:
    """Every candidate on q and k, the reason for each left out, and the pair the in-place one rotates
    (to be reset to q and k before its check)."""
    cos_full, sin_full = full_width(cos, sin, layout, q.dtype)  # [s, d] in q's dtype
    q_in_place, k_in_place = q.clone(), k.clone()
    candidates: Candidates = {
        CLONE: (lambda: (q.clone(), k.clone()), (q, k)),
        EAGER: (lambda: apply_rope_qk(q, k, cos, sin, layout=layout, backend="eager"), (q, k)),
        NATIVE: (lambda: apply_rope_qk(q, k, cos, sin, layout=layout), (q, k)),
        "posenc apply_rope_qk, in place": (
            lambda: apply_rope_qk(q_in_place, k_in_place, cos, sin, layout=layout, inplace=True),
            (q_in_place, k_in_place),
        ),
        "posenc native backend's torch fallback": (lambda: _fallback_pair(q, k, cos, sin, layout), (q, k)),
        "HF-style eager": (lambda: hf_style(q, k, cos_full, sin_full, layout), (q, k)),
    }
    candidates.update({name: (run, (q, k)) for name, (run, _) in module_candidates(q, k, layout).items()})
    q_projected, k_projected = (projected(x) for x in (q, k))
    rotary, positions = RotaryEncoding(q.shape[-1], layout=layout), torch.arange(q.shape[-2])
    candidates[ROTARY_PROJECTED] = (
        lambda: rotary.rotate(q_projected, k_projected, positions, positions),
        (q_projected, k_projected),
    )
    skipped: dict[str, str] = {}
    if layout == "interleaved":
        freqs_cis = torch.complex(cos, sin)  # [s, d/2] complex64: e^{iθ}
        candidates["complex multiply (Meta LLaMA)"] = (lambda: complex_multiply(q, k, freqs_cis), (q, k))
    else:
        skipped["complex multiply (Meta LLaMA)"] = "pairs (2k, 2k+1) only"
    if compile:
        compiled, failed = _compiled_candidates(q, k, cos, sin, layout)
        candidates.update(compiled)
        skipped.update(failed)
    else:
        skipped["torch.compile(posenc apply_rope)"] = skipped["torch.compile(HF-style)"] = "not requested"
    return candidates, skipped, (q_in_place, k_in_place)


def projected(x: torch.Tensor) -> torch.Tensor:
    """x's values as posenc's attention passes q and k: a ``[b, h, s, d]`` view of a ``[b, s, h, d]``
    tensor (the projection ``[b, s, h·d]`` viewed per head), not contiguous."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _grid(s: int) -> tuple[int, int]:
    """An h×w grid of s patches, as square as s allows (2048 -> 32×64)."""
    h = 1 << (s.bit_length() - 1) // 2
    return h, s // h


def module_candidates(
    q: torch.Tensor, k: torch.Tensor, layout: str
) -> dict[str, tuple[Callable[[], tuple], Callable[[], tuple]]]:
    """``RotaryEncoding.rotate`` on q and k at positions 0 … s − 1, and on an h×w grid with axial and
    M-RoPE frequencies: name -> (the call, its expected output: the reference rotation by the module's
    own cos/sin tables)."""
    b, h, s, d = q.shape
    rows, cols = _grid(s)
    grid = grid_positions((rows, cols))  # [s, 2]
    modules = {
        ROTARY: (RotaryEncoding(d, layout=layout), torch.arange(s)),
        ROTARY_AXIAL: (RotaryEncoding(d, layout=layout, axes=2), grid),
        ROTARY_MROPE: (
            RotaryEncoding(d, layout=layout, sections=qwen2_vl_sections(d // 2)),
            torch.cat((torch.zeros(s, 1, dtype=torch.int64), grid), dim=1),  # one frame: t = 0
        ),
    }

    def expected(module: RotaryEncoding, positions: torch.Tensor) -> Callable[[], tuple]:
        cos, sin = (table.to(torch.float32) for table in module.cos_sin(positions))
        return lambda: apply_rope_qk(q, k, cos, sin, layout=layout, backend="eager")

    return {
        name: (lambda module=module, p=positions: module.rotate(q, k, p, p), expected(module, positions))
        for name, (module, positions) in modules.items()
    }


def _time_from(
    candidates: Candidates, cache: str, flush: torch.Tensor, rounds: int, clock: Callable[[], float]
) -> dict[str, Timing]:
    """Every candidate timed in alternating rounds, each after a reset step (timed apart and dropped)
    that leaves the caches in state ``cache``."""
    timed: dict[str, Callable[[], object]] = {}
    for name, (candidate, inputs) in candidates.items():
        read_first = (flush,) if cache == "cold" else inputs
        timed[_RESET + name] = lambda read_first=read_first: _read(read_first)
        timed[name] = candidate
    return {
        name: t
        for name, t in time_alternating(timed, rounds=rounds, clock=clock).items()
        if not name.startswith(_RESET)
    }


def _case(
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    layout: str,
    rounds: int,
    compile: bool,
    caches: Sequence[str],
    flush: torch.Tensor,
    clock: Callable[[], float] = time.perf_counter,
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
    exact = [apply_rope(x.double(), cos64, sin64, layout=layout, backend="eager") for x in (q, k)]
    candidates, skipped, (q_in_place, k_in_place) = _cpu_candidates(q, k, cos, sin, layout, compile)
    on_grid = {name: own() for name, (_, own) in module_candidates(q, k, layout).items() if name != ROTARY}

    deviations: dict[str, float | None] = {CLONE: None}  # the clone does not rotate
    errors: dict[str, float | None] = {CLONE: None}
    for name, (candidate, _) in candidates.items():
        if name == CLONE:
            continue
        q_in_place.copy_(q), k_in_place.copy_(k)
        got = candidate()
        deviations[name] = check_agreement(name, got, on_grid.get(name, expected), case)
        # against float64: the 1-D rotation (the grid rows' own reference is their check above)
        errors[name] = (
            None
            if name in on_grid
            else max(float((g.double() - e).abs().max()) for g, e in zip(got, exact, strict=True))
        )

    entries = []
    for cache in caches:
        timings = _time_from(candidates, cache, flush, rounds, clock)
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


def _training_steps(
    q: torch.Tensor,
    k: torch.Tensor,
    grads: tuple[torch.Tensor, torch.Tensor],
    tables: tuple[torch.Tensor, ...],
    layout: str,
) -> dict[str, Callable[[], tuple[torch.Tensor, ...]]]:
    """name -> one forward and backward pass on leaves made from q and k, returning the gradients
    (``torch.autograd.grad``: nothing accumulates between calls); the floor returns its clones."""
    cos, sin, k_cos, k_sin = tables
    rotary = RotaryEncoding(q.shape[-1], layout=layout)
    positions = torch.arange(q.shape[-2])
    leaves = q.detach().requires_grad_(), k.detach().requires_grad_()  # q's and k's memory: warmed alike

    def rotated_by(backend: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        return lambda: apply_rope_qk(
            *leaves, cos, sin, k_cos=k_cos, k_sin=k_sin, layout=layout, backend=backend
        )

    def step(rotate: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], tuple]:
        return lambda: torch.autograd.grad(rotate(), leaves, grads)

    b, h, s, d = q.shape
    projections = tuple(
        x.transpose(1, 2).reshape(b, s, h * d).requires_grad_() for x in (q, k)
    )  # [b, s, h·d]

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], as attention views a projection

    def projected_step() -> tuple[torch.Tensor, ...]:
        rotated = rotary.rotate(*(heads(p) for p in projections), positions, positions)
        return tuple(heads(g) for g in torch.autograd.grad(rotated, projections, grads))

    return {
        CLONE: lambda: (q.clone(), k.clone(), grads[0].clone(), grads[1].clone()),
        NATIVE: step(rotated_by("auto")),
        EAGER: step(rotated_by("eager")),
        ROTARY: step(lambda: rotary.rotate(*leaves, positions, positions)),
        ROTARY_PROJECTED: projected_step,
    }


def _training_case(
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    layout: str,
    rounds: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Forward and backward of every :data:`TRAINING` candidate on the same q, k and gradients, each
    checked against float64 first, then timed in alternating rounds from a warm cache."""
    b, h, s, d = shape
    generator = torch.Generator().manual_seed(1)
    q, k, grad_q, grad_k = (torch.randn(shape, generator=generator).to(dtype) for _ in range(4))
    inv_freq, _ = rope_inv_freq(d)
    cos64, sin64 = rope_cos_sin(s, inv_freq, dtype=torch.float64)  # what RotaryEncoding caches
    tables = (cos64.float(), sin64.float(), cos64.float(), sin64.float())  # k's own (equal) tables
    steps = _training_steps(q, k, (grad_q, grad_k), tables, layout)
    exact = [apply_rope(g.double(), cos64, -sin64, layout=layout, backend="eager") for g in (grad_q, grad_k)]
    errors: dict[str, float | None] = {CLONE: None}
    case = f"{shape} {str(dtype).removeprefix('torch.')} {layout} training"
    for name, run_step in steps.items():
        if name != CLONE:
            got = run_step()
            check_agreement(name, got, [e.to(dtype) for e in exact], case)
            errors[name] = max(float((g.double() - e).abs().max()) for g, e in zip(got, exact, strict=True))
    candidates: Candidates = {name: (run_step, (q, k, grad_q, grad_k)) for name, run_step in steps.items()}
    timings = _time_from(candidates, "warm", torch.empty(0), rounds, clock)
    floor, eager = timings[CLONE].median_ms, timings[EAGER].median_ms
    return {
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "layout": layout,
        "cache": "warm",
        "timings": [
            {
                **t.as_dict(),
                "vs_floor": t.median_ms / floor,
                "vs_eager": t.median_ms / eager,
                "max_abs_grad_error_vs_float64": errors[t.name],
            }
            for t in timings.values()
        ],
    }


def run(
    shapes: Sequence[tuple[int, int, int, int]] | None = None,
    dtypes: Sequence[str] = tuple(DTYPES),
    layouts: Sequence[str] = LAYOUTS,
    rounds: int = 41,
    compile: bool = True,
    reuse_memory: bool = True,
    caches: Sequence[str] = tuple(CACHES),
    training: bool = True,
    cpu_time: bool = False,
) -> dict:
    """Timings of every candidate for every (shape, dtype, layout); JSON-ready.

    Args:
        shapes: (b, h, s, d) of q and k (default :data:`SHAPES`).
        rounds: alternating rounds per case (after 2 warm-up rounds).
        compile: include the torch.compile candidates (each compiled before timing).
        reuse_memory: call :func:`steady_malloc` first (process-wide; see there).
        caches: the cache states to time from, keys of :data:`CACHES`.
        training: also time forward and backward (:data:`TRAINING`), in ``result["training"]``.
        cpu_time: time by the CPU time of this thread (``time.thread_time``) instead of the wall
            clock, for a machine shared with other jobs: the time a call waited for a core is left
            out. Needs one torch thread (``OMP_NUM_THREADS=1``), where the thread does all the work.
    """
    if cpu_time and torch.get_num_threads() != 1:
        raise ValueError(
            f"cpu_time counts the calling thread only; it needs one torch thread, got {torch.get_num_threads()} "
            "(set OMP_NUM_THREADS=1 or torch.set_num_threads(1))"
        )
    clock = time.thread_time if cpu_time else time.perf_counter
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
    cases, trained = [], []
    for shape in shapes:
        for dtype in dtypes:
            for layout in layouts:
                cases += _case(tuple(shape), DTYPES[dtype], layout, rounds, compile, caches, flush, clock)
                if training:
                    trained.append(_training_case(tuple(shape), DTYPES[dtype], layout, rounds, clock))
    return {
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "rounds": rounds,
        "clock": "CPU time of the calling thread" if cpu_time else "wall clock",
        "malloc": malloc,
        "caches": {name: CACHES[name] for name in caches},
        "native_kernel": native_status() if native_available() else f"not used: {native_status()}",
        "cases": cases,
        "training_candidates": TRAINING if training else {},
        "training": trained,
    }


#: The GPU bench's names, read from :mod:`posenc.bench.rope_cuda` where they live (it imports this
#: module's recipes, so it is loaded on first use rather than at the end of this one).
_CUDA_NAMES = (
    "CUDA_SHAPES",
    "CUDA_DTYPES",
    "DIRECTIONS",
    "COPY",
    "TRITON",
    "TRITON_IN_PLACE",
    "REFERENCE",
    "HF_EAGER",
    "HF_COMPILED",
    "LIGER",
    "PEERS",
    "CUDA_AGREEMENT",
    "run_cuda",
)


def __getattr__(name: str):
    if name in _CUDA_NAMES:
        from posenc.bench import rope_cuda

        return getattr(rope_cuda, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
