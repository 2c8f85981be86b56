"""What a stack's per-layer attention costs: a window, chunks, learned sinks and a query temperature.

One ``MultiHeadAttention`` layer (backend ``"sdpa"``, causal, NoPE, projections included), b=4,
d_model=256, 8 heads, float32, forward + backward (the gradient of the input and of every parameter),
per sequence length (512 and 2048 by default), against the same layer with none of them: unbiased
``is_causal`` SDPA. The rows: ``window`` (sliding window, 128 tokens by default), ``chunk`` (chunked
attention, 128), ``sinks`` (GPT-OSS's learned sink logits) and ``temperature`` (Llama 4's, with
floor_scale 64 so that the factor moves within the sequence). Timed in alternating rounds in one
process (:func:`posenc.bench.harness.time_alternating`); each row's peak resident memory above the
layer's, forward + backward, measured in a fresh subprocess per call (:mod:`posenc.bench.memory`).

Before timing, each layer's output and input gradient are checked against the same layer on the
eager backend to 1e-4.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

import torch

from posenc.bench.harness import steady_malloc, time_alternating

SEQ_LENS: tuple[int, ...] = (512, 2048)
LAYER = {"batch": 4, "d_model": 256, "heads": 8}
WINDOW = CHUNK = 128
BASELINE = "unbiased SDPA"
CASES: tuple[str, ...] = (BASELINE, "window", "chunk", "sinks", "temperature")
TOLERANCE = 1e-4


def layer_arguments(case: str, window: int = WINDOW, chunk: int = CHUNK) -> dict:
    """The ``MultiHeadAttention`` arguments of a row."""
    from posenc.temperature import Llama4Temperature

    return {
        BASELINE: {},
        "window": {"window": window},
        "chunk": {"chunk": chunk},
        "sinks": {"sinks": True},
        "temperature": {"temperature": Llama4Temperature(floor_scale=64)},
    }[case]


def build_layer(case: str, backend: str = "sdpa", *, window: int = WINDOW, chunk: int = CHUNK):
    from posenc.attention import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(
        LAYER["d_model"], LAYER["heads"], backend=backend, **layer_arguments(case, window, chunk)
    )
    if layer.sinks is not None:
        with torch.no_grad():
            layer.sinks.normal_()  # trained sinks are not zero
    return layer


def training_step(layer, x: torch.Tensor):
    """One forward + backward: the call each row times."""

    def step():
        x.grad = None
        layer.zero_grad(set_to_none=True)
        out = layer(x)
        out.backward(torch.ones_like(out))
        return out

    return step


def _input(seq_len: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(LAYER["batch"], seq_len, LAYER["d_model"], generator=generator).requires_grad_()


def check(case: str, seq_len: int, *, window: int = WINDOW, chunk: int = CHUNK) -> float:
    """Largest difference of the sdpa layer's output and input gradient from the eager layer's."""
    worst = 0.0
    results = []
    for backend in ("sdpa", "eager"):
        x = _input(seq_len)
        out = build_layer(case, backend, window=window, chunk=chunk)(x)
        out.backward(torch.ones_like(out))
        results.append((out.detach(), x.grad))
    for fast, slow in zip(*results, strict=True):
        worst = max(worst, float((fast - slow).abs().max()) / max(1.0, float(slow.abs().max())))
    return worst


def memory_call(spec: dict):
    """For :func:`posenc.bench.memory.measure`: the row's forward + backward, gradients enabled."""
    layer = build_layer(spec["case"], window=spec["window"], chunk=spec["chunk"])
    x = _input(spec["seq_len"])
    step = training_step(layer, x)

    def call():
        with torch.enable_grad():
            return step()

    return call


def run(
    seq_lens: Sequence[int] = SEQ_LENS,
    *,
    rounds: int = 7,
    window: int = WINDOW,
    chunk: int = CHUNK,
    memory: bool = True,
    cases: Sequence[str] = CASES,
) -> dict:
    """Times and memory of each row at each length, with ratios to the unbiased layer."""
    from posenc.bench.memory import measure

    steady_malloc()
    rows = []
    for seq_len in seq_lens:
        errors = {
            case: check(case, seq_len, window=window, chunk=chunk) for case in cases if case != BASELINE
        }
        bad = {case: error for case, error in errors.items() if not error <= TOLERANCE}
        if bad:
            raise RuntimeError(f"at s={seq_len} the sdpa layer differs from the eager one: {bad}")
        x = _input(seq_len)
        steps = {case: training_step(build_layer(case, window=window, chunk=chunk), x) for case in cases}
        timings = time_alternating(steps, rounds=rounds)
        peaks = {}
        if memory:
            for case in cases:
                spec = {"case": case, "seq_len": seq_len, "window": window, "chunk": chunk}
                result = measure("posenc.bench.stacks:memory_call", spec)
                peaks[case] = result.get("peak_extra_mib") if result.get("ok") else None
        base = timings[BASELINE].median_ms
        for case in cases:
            peak, base_peak = peaks.get(case), peaks.get(BASELINE)
            rows.append(
                {
                    "seq_len": seq_len,
                    "case": case,
                    "median_ms": timings[case].median_ms,
                    "min_ms": timings[case].min_ms,
                    "max_ms": timings[case].max_ms,
                    "ratio": timings[case].median_ms / base,
                    "max_error": errors.get(case, 0.0),
                    "peak_extra_mib": peak,
                    "memory_ratio": None if peak is None or not base_peak else peak / base_peak,
                }
            )
    return {
        "rows": rows,
        "layer": LAYER | {"window": window, "chunk": chunk, "backend": "sdpa", "dtype": "float32"},
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
