"""``posenc bench attention --device cuda``: flex_attention's in-kernel biases on the GPU.

b=1, h=32, d_head=128, bfloat16, causal, inference, s up to 32768. Compiled flex_attention with the ALiBi
and T5 ``score_mod`` (the bias computed inside the kernel, from the query and key indices) against the same
flex_attention without a bias, against unbiased SDPA, and against SDPA with the ``[h, s, s]`` bias
materialised as a float mask. Every candidate is first checked against the float64 oracle
(:func:`posenc.bench.oracle.attention_oracle`, the encoding's own hooks) at s = :data:`CHECK_LEN`; then, per
length, timed with CUDA events in alternating rounds; its peak extra memory is
``torch.cuda.max_memory_allocated`` above what was allocated before one call. A candidate that runs out of
GPU memory (``torch.cuda.OutOfMemoryError``) is reported at that length and not tried at longer ones.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from posenc.bench.harness import peak_extra_mib, require_cuda, time_on_device
from posenc.bench.oracle import attention_oracle
from posenc.encodings.bias import ALiBi, T5RelativeBias
from posenc.encodings.nope import NoPE

UNBIASED = "SDPA, no bias (is_causal)"
#: T5's table is drawn N(0, 1), not its 0.02 initialisation, so the bias is as large as trained ones.
T5_TABLE_STD = 1.0


CUDA_SEQ_LENS: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768)
CUDA_BATCH, CUDA_HEADS, CUDA_D_HEAD = 1, 32, 128
CUDA_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
#: The length at which every candidate is checked against float64 before any timing.
CHECK_LEN = 256
#: Largest |candidate − float64 reference| accepted at :data:`CHECK_LEN`, per dtype.
CUDA_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 1e-4}
FLEX_UNBIASED = "flex_attention, no bias (causal block mask)"
FLEX_ALIBI = "flex_attention + ALiBi score_mod"
FLEX_T5 = "flex_attention + T5 score_mod"
#: name -> (which bias it computes, what it is).
CUDA_CANDIDATES: dict[str, tuple[str, str]] = {
    UNBIASED: ("none", "F.scaled_dot_product_attention(q, k, v, is_causal=True)"),
    FLEX_UNBIASED: ("none", "compiled flex_attention with a causal block mask and no score_mod"),
    FLEX_ALIBI: ("alibi", "the same with ALiBi.score_mod(): −m_h·(i − j) computed in the kernel"),
    FLEX_T5: ("t5", "the same with T5RelativeBias.score_mod(): bucket of j − i, table lookup in the kernel"),
    "SDPA + ALiBi bias (materialised)": (
        "alibi",
        "[h, s, s] bias from the encoding, cast to q's dtype, causal −inf, as SDPA's float attn_mask",
    ),
    "SDPA + T5 bias (materialised)": ("t5", "the same with T5RelativeBias"),
}


def _inputs(seq_len: int, heads: int, d_head: int, batch: int) -> dict:
    """q, k, v ``[b, h, s, d]`` float32, positions ``[s]``, and the two encodings, all seeded."""
    generator = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(batch, heads, seq_len, d_head, generator=generator) for _ in range(3))
    t5 = T5RelativeBias(heads, bidirectional=False)  # a decoder's causal buckets
    with torch.no_grad():
        t5.table.copy_(torch.randn(t5.table.shape, generator=generator) * T5_TABLE_STD)
    return {"q": q, "k": k, "v": v, "positions": torch.arange(seq_len), "alibi": ALiBi(heads), "t5": t5}


def _device_inputs(seq_len: int, heads: int, d_head: int, batch: int, dtype: torch.dtype, device) -> dict:
    """:func:`_inputs` rounded to ``dtype`` (so the float64 reference sees the same values), and its
    q, k, v, positions and encodings on ``device`` (under the same keys, with ``_cpu`` for the CPU ones)."""
    cpu = _inputs(seq_len, heads, d_head, batch)
    for name in ("q", "k", "v"):
        cpu[name] = cpu[name].to(dtype).float()
    on_device = {name: cpu[name].to(device=device, dtype=dtype) for name in ("q", "k", "v")}
    on_device["positions"] = cpu["positions"].to(device)
    for name in ("alibi", "t5"):
        on_device[name] = copy.deepcopy(cpu[name]).to(device)
    return {**on_device, "cpu": cpu}


def cuda_candidates(inputs: dict, *, compile: bool = True) -> dict[str, Callable[[], torch.Tensor]]:
    """name -> a call computing its attention on ``inputs`` (from :func:`_device_inputs`; under no_grad)."""
    from posenc.attention import _causal_block_mask, _compiled_flex

    q, k, v, positions = inputs["q"], inputs["k"], inputs["v"], inputs["positions"]
    seq_len = q.shape[2]
    block_mask = _causal_block_mask(seq_len, seq_len, q.device.type)

    def flex(score_mod) -> Callable[[], torch.Tensor]:
        if compile:
            return lambda: _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask)
        from torch.nn.attention.flex_attention import flex_attention

        def eager() -> torch.Tensor:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "flex_attention called without torch.compile"
                return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

        return eager

    def materialised(name: str) -> Callable[[], torch.Tensor]:
        encoding = inputs[name]

        def run() -> torch.Tensor:
            bias = encoding.bias(positions, positions).to(q.dtype)  # [h, s, s]
            causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~causal, float("-inf")))

        return run

    return {
        UNBIASED: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        FLEX_UNBIASED: flex(None),
        FLEX_ALIBI: flex(inputs["alibi"].score_mod()),
        FLEX_T5: flex(inputs["t5"].score_mod()),
        "SDPA + ALiBi bias (materialised)": materialised("alibi"),
        "SDPA + T5 bias (materialised)": materialised("t5"),
    }


def _device_case(
    seq_len: int, config: dict, rounds: int, compile: bool, device, stopped: dict[str, int]
) -> dict:
    """One length: each candidate run once (compiling it) and measured, unless it ran out of memory at
    this or a shorter length; then the rest timed in alternating rounds."""
    if compile:
        torch._dynamo.reset()  # each length compiles afresh; the recompile limit is never reached
    inputs = _device_inputs(seq_len, device=device, **config)
    runs = cuda_candidates(inputs, compile=compile)
    not_run, memory = {}, {}
    for name in list(runs):
        if name in stopped:
            not_run[name] = f"out of memory at s={stopped[name]}"
            del runs[name]
            continue
        try:
            runs[name]()  # compiles
            memory[name] = peak_extra_mib(runs[name], device)
        except torch.cuda.OutOfMemoryError as error:
            stopped[name] = seq_len
            not_run[name] = f"out of memory at s={seq_len}: {str(error).splitlines()[0][:120]}"
            del runs[name]
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    try:
        timings = time_on_device(runs, rounds=rounds, device=device, warmup=1) if runs else {}
    except torch.cuda.OutOfMemoryError:  # the candidates together do not fit: time them one by one
        timings = {}
        for name, run in runs.items():
            try:
                timings.update(time_on_device({name: run}, rounds=rounds, device=device, warmup=1))
            except torch.cuda.OutOfMemoryError as error:
                stopped[name] = seq_len
                not_run[name] = (
                    f"out of memory at s={seq_len} while timed: {str(error).splitlines()[0][:120]}"
                )
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
    flex_floor = timings[FLEX_UNBIASED].median_ms if FLEX_UNBIASED in timings else None
    sdpa_floor = timings[UNBIASED].median_ms if UNBIASED in timings else None
    return {
        "seq_len": seq_len,
        "timings": [
            {
                **t.as_dict(),
                "of_unbiased_flex": None if flex_floor is None else flex_floor / t.median_ms,
                "of_sdpa": None if sdpa_floor is None else sdpa_floor / t.median_ms,
                "peak_extra_mib": memory[t.name],
            }
            for t in timings.values()
        ],
        "not_run": not_run,
    }


def _check_on_device(config: dict, compile: bool, device, tolerance: float) -> dict[str, float]:
    """Each candidate's max |error| against float64 at s = :data:`CHECK_LEN`; AssertionError beyond
    ``tolerance`` (NaN included)."""
    inputs = _device_inputs(CHECK_LEN, device=device, **config)
    cpu = inputs["cpu"]
    q, k, v = (cpu[name].double() for name in ("q", "k", "v"))
    encodings = {"none": NoPE(), **{name: copy.deepcopy(cpu[name]) for name in ("alibi", "t5")}}
    expected = {
        bias: attention_oracle(encoding.double(), q, k, v, cpu["positions"])
        for bias, encoding in encodings.items()
    }
    errors = {}
    for name, call in cuda_candidates(inputs, compile=compile).items():
        error = float((call().double().cpu() - expected[CUDA_CANDIDATES[name][0]]).abs().max())
        if not error <= tolerance:  # also catches NaN
            raise AssertionError(
                f"{name} disagrees with the float64 reference by {error:.3g} > {tolerance:g} (s={CHECK_LEN})"
            )
        errors[name] = error
    return errors


def run_cuda(
    seq_lens: Sequence[int] = CUDA_SEQ_LENS,
    rounds: int = 10,
    compile: bool = True,
    device: str = "cuda",
    dtype: str = "bfloat16",
    heads: int = CUDA_HEADS,
    d_head: int = CUDA_D_HEAD,
    batch: int = CUDA_BATCH,
) -> dict:
    """The GPU benchmark (see the module docstring); JSON-ready.

    Args:
        seq_lens: sequence lengths, in increasing order (a candidate out of memory at one is not
            tried at the next).
        rounds: alternating rounds per length (after 1 warm-up round).
        compile: compiled flex_attention (False: torch's eager flex, which materialises the scores).
        device: ``"cuda"``; ``"cpu"`` runs the same code with wall-clock timings, for tests.
        dtype, heads, d_head, batch: the configuration (default bfloat16, 32 heads of 128, batch 1).

    Raises:
        RuntimeError: ``device`` is CUDA and no GPU is usable.
        ValueError: bad lengths, rounds or dtype.
    """
    require_cuda(device)
    for seq_len in seq_lens:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"sequence lengths must be positive integers, got {seq_len!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if dtype not in CUDA_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(CUDA_DTYPES)}; got {dtype!r}")
    torch_dtype = CUDA_DTYPES[dtype]
    config = {"heads": heads, "d_head": d_head, "batch": batch, "dtype": torch_dtype}
    tolerance = CUDA_TOLERANCE[torch_dtype]
    with torch.no_grad():
        errors = _check_on_device(config, compile, device, tolerance)
        stopped: dict[str, int] = {}
        cases = [_device_case(seq_len, config, rounds, compile, device, stopped) for seq_len in seq_lens]
    return {
        "config": {
            "batch": batch,
            "heads": heads,
            "d_head": d_head,
            "dtype": dtype,
            "causal": True,
            "grad": "torch.no_grad",
            "compiled_flex": compile,
        },
        "device": torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else str(device),
        "torch": torch.__version__,
        "rounds": rounds,
        "candidates": {name: what for name, (_, what) in CUDA_CANDIDATES.items()},
        "check": {"seq_len": CHECK_LEN, "tolerance": tolerance, "max_abs_error_vs_float64": errors},
        "cases": cases,
        "out_of_memory_at": {name: stopped.get(name) for name in CUDA_CANDIDATES},
    }
