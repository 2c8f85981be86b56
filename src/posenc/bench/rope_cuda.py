"""`posenc bench rope --device cuda`: the Triton RoPE kernel against the memory floor and its peers
(HF-style eager, torch.compile of it, liger-kernel), forward and backward, each checked against float64."""

from __future__ import annotations

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
from posenc.bench.rope import _fresh_compile, _posenc_pair, full_width, hf_style
from posenc.functional.rope import LAYOUTS, apply_rope, rope_cos_sin, rope_inv_freq
from posenc.kernels.rope_triton import apply_rope_qk_triton, triton_available

#: (b, s, h_q, h_kv, d): 32 heads at 8×4K, the same with 8 KV heads (GQA), one 8K sequence, 4×2K.
CUDA_SHAPES: tuple[tuple[int, int, int, int, int], ...] = (
    (8, 4096, 32, 32, 128),
    (8, 4096, 32, 8, 128),
    (1, 8192, 32, 8, 128),
    (4, 2048, 32, 32, 128),
)
CUDA_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DIRECTIONS = ("forward", "backward")
COPY = "copy of the same bytes (memory floor)"
TRITON = "posenc Triton"
TRITON_IN_PLACE = "posenc Triton, in place"
REFERENCE = "posenc apply_rope (reference, eager)"
HF_EAGER = "HF-style eager"
HF_COMPILED = "torch.compile(HF-style)"
LIGER = "liger-kernel"
#: The peers posenc's kernel is compared with (``speedup_vs_peers``).
PEERS = (HF_EAGER, HF_COMPILED, LIGER)
#: Largest |candidate − float64| accepted, as a fraction of max |float64 result|.
CUDA_AGREEMENT = {torch.float32: 1e-5, torch.bfloat16: 2**-6, torch.float16: 2**-9}
#: Written before every timed call to evict q, k and the outputs from L2 (an H200 has 60 MiB).
L2_FLUSH_BYTES = 256 << 20


def _liger_rope() -> Callable | None:
    """liger-kernel's RoPE for q and k (pairs (i, i + d/2), full-width [1, s, d] cos/sin), if installed."""
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except ImportError:
        return None
    return liger_rotary_pos_emb


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _rotations(
    cos: torch.Tensor, sin: torch.Tensor, layout: str, dtype: torch.dtype, compile: bool
) -> tuple[dict[str, Callable], dict[str, str]]:
    """name -> a differentiable (q, k) -> (q', k') for each out-of-place candidate; reasons for those left out."""
    cos_full, sin_full = full_width(cos, sin, layout, dtype)  # [s, d] in q's dtype, as HF passes them
    rotations: dict[str, Callable] = {
        TRITON: lambda q, k: apply_rope_qk_triton(q, k, cos, sin, layout=layout),
        REFERENCE: lambda q, k: _posenc_pair(q, k, cos, sin, layout),
        HF_EAGER: lambda q, k: hf_style(q, k, cos_full, sin_full, layout),
    }
    skipped: dict[str, str] = {}
    if compile:
        torch._dynamo.reset()  # every case compiles afresh; the recompile limit is never reached
        compiled = _fresh_compile(hf_style)
        rotations[HF_COMPILED] = lambda q, k: compiled(q, k, cos_full, sin_full, layout)
    else:
        skipped[HF_COMPILED] = "not requested"
    liger = _liger_rope()
    if liger is None:
        skipped[LIGER] = "liger-kernel is not installed"
    elif layout != "half":
        skipped[LIGER] = "pairs (i, i + d/2) only"
    else:
        rotations[LIGER] = lambda q, k: liger(q, k, cos_full[None], sin_full[None])
    return rotations, skipped


def _agreement(name: str, got: Sequence[torch.Tensor], exact: Sequence[torch.Tensor], case: str) -> float:
    """max |got − exact| over the first batch row of q and k; AssertionError beyond the dtype's bound."""
    deviation = max(float((g[:1].double() - e).abs().max()) for g, e in zip(got, exact, strict=True))
    bound = CUDA_AGREEMENT[got[0].dtype] * max(max(float(e.abs().max()) for e in exact), 1.0)
    if not deviation <= bound:  # also catches NaN
        raise AssertionError(f"{name} disagrees with float64 by {deviation:.3g} > {bound:.3g} ({case})")
    return deviation


#: name -> a call timed on the GPU
Calls = dict[str, Callable[[], object]]


def _forward_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin: tuple,
    cos_sin64: tuple,
    layout: str,
    rotations: dict,
    case: str,
) -> tuple[Calls, dict[str, float | None]]:
    """The copy, each rotation of q and k and the in-place kernel, each checked against float64 on the
    first batch row; the calls to time and their errors."""
    (cos, sin), (cos64, sin64) = cos_sin, cos_sin64
    exact = [apply_rope(x[:1].double(), cos64, sin64, layout=layout, backend="eager") for x in (q, k)]
    timed: Calls = {COPY: lambda: (q.clone(), k.clone())}
    errors: dict[str, float | None] = {COPY: None}
    for name, rotate in rotations.items():
        inputs = (q, k) if name != LIGER else (q.clone(), k.clone())  # liger may write its inputs
        errors[name] = _agreement(name, rotate(*(x.clone() for x in inputs)), exact, case)
        timed[name] = lambda rotate=rotate, inputs=inputs: rotate(*inputs)
    q_in_place, k_in_place = q.clone(), k.clone()
    in_place = lambda: apply_rope_qk_triton(  # noqa: E731
        q_in_place, k_in_place, cos, sin, layout=layout, inplace=True
    )
    errors[TRITON_IN_PLACE] = _agreement(TRITON_IN_PLACE, in_place(), exact, case)
    timed[TRITON_IN_PLACE] = in_place
    return timed, errors


def _backward_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin64: tuple,
    layout: str,
    rotations: dict,
    case: str,
    generator: torch.Generator,
) -> tuple[Calls, dict[str, float | None]]:
    """The gradient of q and k from random gradients of their rotations, R(−θ)·grad, for each rotation
    (checked against float64), and the copy of the gradients; the calls to time and their errors."""
    cos64, sin64 = cos_sin64
    grad_q, grad_k = (
        torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype) for x in (q, k)
    )
    exact = [
        apply_rope(g[:1].double(), cos64, -sin64, layout=layout, backend="eager") for g in (grad_q, grad_k)
    ]
    timed: Calls = {COPY: lambda: (grad_q.clone(), grad_k.clone())}
    errors: dict[str, float | None] = {COPY: None}
    for name, rotate in rotations.items():
        leaves = (q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_())
        outputs = rotate(*leaves)

        def backward(outputs=outputs, leaves=leaves):
            return torch.autograd.grad(outputs, leaves, (grad_q, grad_k), retain_graph=True)

        errors[name] = _agreement(name, backward(), exact, case)
        timed[name] = backward
    return timed, errors


def _gpu_case(
    shape: tuple[int, int, int, int, int],
    dtype: torch.dtype,
    layout: str,
    direction: str,
    rounds: int,
    compile: bool,
    device: torch.device,
    flush: torch.Tensor,
) -> dict:
    """Every candidate on the same q and k, checked against float64, then timed; one JSON entry."""
    b, s, h_q, h_kv, d = shape
    generator = torch.Generator(device).manual_seed(0)
    q = torch.randn(b, h_q, s, d, generator=generator, device=device, dtype=dtype)  # [b, h_q, s, d]
    k = torch.randn(b, h_kv, s, d, generator=generator, device=device, dtype=dtype)  # [b, h_kv, s, d]
    inv_freq, _ = rope_inv_freq(d)
    positions = torch.arange(s, device=device)
    cos, sin = rope_cos_sin(positions, inv_freq.to(device))  # [s, d/2] float32, exact angles
    cos64, sin64 = rope_cos_sin(positions, inv_freq.to(device), dtype=torch.float64)
    case = f"{shape} {str(dtype).removeprefix('torch.')} {layout} {direction}"
    rotations, skipped = _rotations(cos, sin, layout, dtype, compile)

    if direction == "forward":
        timed, errors = _forward_calls(q, k, (cos, sin), (cos64, sin64), layout, rotations, case)
    else:
        timed, errors = _backward_calls(q, k, (cos64, sin64), layout, rotations, case, generator)
        skipped[TRITON_IN_PLACE] = "in place does not apply under autograd (it rotates out of place there)"

    timings = time_on_device(timed, rounds=rounds, device=device, before=flush.zero_)
    memory = {name: peak_extra_mib(run, device) for name, run in timed.items()}
    moved = 2 * (q.numel() + k.numel()) * q.element_size()  # read once, written once
    floor = timings[COPY].median_ms
    entries = [
        {
            **t.as_dict(),
            "gb_per_s": moved / (t.median_ms * 1e-3) / 1e9,
            "of_copy_bandwidth": floor / t.median_ms,
            "peak_extra_mib": memory[t.name],
            "max_abs_error_vs_float64": errors[t.name],
        }
        for t in timings.values()
    ]
    kernel = timings[TRITON].median_ms
    peers = {name: timings[name].median_ms / kernel for name in PEERS if name in timings}
    fastest = min(peers, key=lambda name: timings[name].median_ms)
    return {
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "layout": layout,
        "direction": direction,
        "bytes_moved": moved,
        "timings": entries,
        "not_timed": skipped,
        "speedup_vs_peers": peers,
        "kernel": {
            "of_copy_bandwidth": floor / kernel,
            "fastest_peer": fastest,
            "vs_fastest_peer": peers[fastest],
            "in_place_peak_extra_mib": memory.get(TRITON_IN_PLACE),
        },
    }


def run_cuda(
    shapes: Sequence[tuple[int, int, int, int, int]] = CUDA_SHAPES,
    dtypes: Sequence[str] = tuple(CUDA_DTYPES),
    layouts: Sequence[str] = LAYOUTS,
    directions: Sequence[str] = DIRECTIONS,
    rounds: int = 30,
    compile: bool = True,
    device: str = "cuda",
) -> dict:
    """The GPU benchmark (see the module docstring); JSON-ready.

    Args:
        shapes: (b, s, h_q, h_kv, d) of q ``[b, h_q, s, d]`` and k ``[b, h_kv, s, d]``.
        dtypes: names in :data:`CUDA_DTYPES`.
        layouts: ``"half"`` and/or ``"interleaved"`` (liger-kernel: half only).
        directions: ``"forward"`` and/or ``"backward"`` (the gradient of q and k).
        rounds: alternating rounds per case (after 2 warm-up rounds).
        compile: include torch.compile of the HF-style recipe.
        device: ``"cuda"`` (or ``"cuda:1"``); ``"cpu"`` runs the same code with wall-clock timings and
            no memory figures, the kernel in Triton's interpreter (``TRITON_INTERPRET=1``), for tests.

    Raises:
        RuntimeError: no CUDA GPU, or triton missing.
        ValueError: unknown dtype, layout or direction.
    """
    require_cuda(device)
    for kind, names, valid in (
        ("dtype", dtypes, CUDA_DTYPES),
        ("layout", layouts, LAYOUTS),
        ("direction", directions, DIRECTIONS),
    ):
        for name in names:
            if name not in valid:
                raise ValueError(f"{kind} must be one of {', '.join(valid)}; got {name!r}")
    target = torch.device(device)
    if not triton_available(target):
        raise RuntimeError(
            f"the GPU benchmark needs triton (pip install triton) and, on {target.type}, "
            + ("a CUDA GPU" if target.type == "cuda" else "TRITON_INTERPRET=1")
        )
    flush = torch.empty(L2_FLUSH_BYTES // 4 if target.type == "cuda" else 0, device=target)
    cases = [
        _gpu_case(tuple(shape), CUDA_DTYPES[dtype], layout, direction, rounds, compile, target, flush)
        for shape in shapes
        for dtype in dtypes
        for layout in layouts
        for direction in directions
    ]
    return {
        "device": torch.cuda.get_device_name(target) if target.type == "cuda" else str(target),
        "torch": torch.__version__,
        "triton": _package_version("triton"),
        "liger_kernel": _package_version("liger-kernel"),
        "rounds": rounds,
        "l2_flush_bytes": L2_FLUSH_BYTES if target.type == "cuda" else 0,
        "cases": cases,
    }
