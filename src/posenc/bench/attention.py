"""`posenc bench attention`: causal attention with ALiBi, T5 and the relative schemes on CPU, against unbiased SDPA.

Configuration: b=1, h=8, d_head=64, causal, float32, inference (``torch.no_grad``). For each sequence
length every candidate's output is first checked against an eager float64 reference,
softmax(q·kᵀ/√d + bias + mask)·v, to :data:`TOLERANCE` (a fast wrong path fails the run instead of
winning it); then all candidates are timed in alternating rounds in one process, and reported as a
ratio to unbiased causal SDPA (``is_causal=True``), the reference speed.

Memory is measured apart, one fresh subprocess per (candidate, length): glibc is told to return
freed memory to the system (small fixed mmap and trim thresholds), the candidate runs once (and
compiles), the kernel's resident-set high-water mark is reset (``/proc/self/clear_refs``), and the
candidate runs again; the peak extra memory is the high-water mark minus the resident set before
that second call, so it counts everything the call holds at its peak, its output included.
tracemalloc would not see torch's allocations.

The sweep finds the longest sequence each candidate completes within 16 GiB: one subprocess per
(candidate, length), its address space capped (``RLIMIT_AS``) at 16 GiB above what it had after
importing torch, so q, k, v, compilation and every temporary count; a candidate stops at its first
failure. It runs each call once, without the float64 check.

DeBERTa's disentangled attention (DeBERTa-v3's 256 buckets reaching 512, a shared key; causal here) has
two rows: posenc's terms (q·K_rᵀ and k·Q_rᵀ per relative embedding, then a gather) through
``MultiHeadAttention.attend`` on SDPA, and the naive form that gathers the relative key and query of
every pair, ``[b, h, i, j, d]``, which runs only where that tensor fits in :data:`NAIVE_LIMIT_BYTES`.

Shaw et al.'s relative keys (k = 16), the same with relative values, and Transformer-XL's terms each have
a row through ``MultiHeadAttention.attend`` on SDPA (the key terms per table row or per distance, then a
gather or the rel-shift view; with relative values the eager path), and Shaw's and Transformer-XL's naive
forms gather their relative vector for every pair, ``[b, h, i, j, d]``, under the same limit; the sweep
tries those two from :data:`NAIVE_SWEEP` (1024 …) on, below its own lengths.

GPU (:func:`run_cuda`, ``--device cuda``): b=1, h=32, d_head=128, bfloat16, causal, inference, s up to
32768. Compiled flex_attention with the ALiBi and T5 ``score_mod`` (the bias computed inside the
kernel, from the query and key indices) against the same flex_attention without a bias, against
unbiased SDPA, and against SDPA with the ``[h, s, s]`` bias materialised as a float mask. Every
candidate is first checked against float64 at s = :data:`CHECK_LEN`; then, per length, timed with CUDA
events in alternating rounds; its peak extra memory is ``torch.cuda.max_memory_allocated`` above what
was allocated before one call. A candidate that runs out of GPU memory (``torch.cuda.OutOfMemoryError``)
is reported at that length and not tried at longer ones.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import platform
import re
import resource
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from posenc.bench.harness import time_alternating
from posenc.bench.memory import reset_peak, resident_extra_mib, return_freed_memory, status_kib
from posenc.bench.rope import peak_extra_mib, require_cuda, steady_malloc, time_on_device
from posenc.encodings.bias import ALiBi, T5RelativeBias
from posenc.functional.alibi import alibi_attention
from posenc.functional.sinusoidal import sinusoidal_table
from posenc.kernels.per_distance import DEFAULT_BLOCK, decay_windows, per_distance_attention

SEQ_LENS: tuple[int, ...] = (1024, 2048, 4096)
BATCH, HEADS, D_HEAD = 1, 8, 64
#: Largest |candidate − float64 reference| accepted (float32 outputs).
TOLERANCE = 1e-5
#: Sequence lengths the memory sweep tries, in order, per candidate.
SWEEP: tuple[int, ...] = (4096, 8192, 16384, 32768, 65536)
MEMORY_LIMIT_BYTES = 16 << 30
#: Wall-clock limit of one sweep subprocess; longer counts as not completed.
SWEEP_TIMEOUT_S = 300
#: T5's table is drawn N(0, 1), not its 0.02 initialisation, so the bias is as large as trained ones.
T5_TABLE_STD = 1.0

UNBIASED = "SDPA, no bias (is_causal)"
#: name -> (which bias it computes, what it is).
CANDIDATES: dict[str, tuple[str, str]] = {
    UNBIASED: ("none", "F.scaled_dot_product_attention(q, k, v, is_causal=True)"),
    "SDPA + ALiBi bias (materialised)": (
        "alibi",
        "[h, s, s] bias from the encoding + causal −inf as a float attn_mask to SDPA",
    ),
    "SDPA + T5 bias (materialised)": ("t5", "the same with T5RelativeBias"),
    "flex_attention + ALiBi score_mod": (
        "alibi",
        "MultiHeadAttention(backend='flex').attend: compiled flex_attention, score_mod, causal block mask",
    ),
    "flex_attention + T5 score_mod": ("t5", "the same with T5RelativeBias"),
    "posenc alibi_attention": (
        "alibi",
        "posenc.functional.alibi_attention: bias as a strided view, query blocks, per-head windows",
    ),
    "posenc alibi_attention, no window": ("alibi", "the same reading every key (window_tolerance=None)"),
    "posenc relative_attention, T5 table": (
        "t5",
        "posenc.kernels.per_distance.per_distance_attention with T5's distance_bias (no window)",
    ),
}
FOLDED = "m·j as an extra q·k channel"
CENTRED = f"m·(j − block end) as an extra channel, per {DEFAULT_BLOCK}-query block"


def _inputs(seq_len: int, heads: int = HEADS, d_head: int = D_HEAD, batch: int = BATCH) -> dict:
    """q, k, v ``[b, h, s, d]`` float32, positions ``[s]``, and the two encodings, all seeded."""
    generator = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(batch, heads, seq_len, d_head, generator=generator) for _ in range(3))
    t5 = T5RelativeBias(heads, bidirectional=False)  # a decoder's causal buckets
    with torch.no_grad():
        t5.table.copy_(torch.randn(t5.table.shape, generator=generator) * T5_TABLE_STD)
    return {"q": q, "k": k, "v": v, "positions": torch.arange(seq_len), "alibi": ALiBi(heads), "t5": t5}


def candidates(inputs: dict, *, compile: bool = True) -> dict[str, Callable[[], torch.Tensor]]:
    """name -> a call computing its attention on ``inputs`` (run under ``torch.no_grad``)."""
    from posenc.attention import MultiHeadAttention

    q, k, v, positions = inputs["q"], inputs["k"], inputs["v"], inputs["positions"]
    heads, d_head = q.shape[1], q.shape[3]
    layers = {
        (name, backend): MultiHeadAttention(heads * d_head, heads, encoding=inputs[name], backend=backend)
        for name in ("alibi", "t5")
        for backend in ("flex",)
    }

    def flex(name: str) -> Callable[[], torch.Tensor]:
        layer = layers[(name, "flex")]
        if compile:
            return lambda: layer.attend(q, k, v, positions, positions)
        return lambda: _eager_flex(layer, q, k, v, positions)

    def materialised(name: str) -> Callable[[], torch.Tensor]:
        return lambda: materialised_bias_attention(inputs[name], q, k, v, positions)

    slopes = inputs["alibi"].slopes
    t5_bias = inputs["t5"].distance_bias
    return {
        UNBIASED: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "SDPA + ALiBi bias (materialised)": materialised("alibi"),
        "SDPA + T5 bias (materialised)": materialised("t5"),
        "flex_attention + ALiBi score_mod": flex("alibi"),
        "flex_attention + T5 score_mod": flex("t5"),
        "posenc alibi_attention": lambda: alibi_attention(q, k, v, slopes),
        "posenc alibi_attention, no window": lambda: alibi_attention(q, k, v, slopes, window_tolerance=None),
        "posenc relative_attention, T5 table": lambda: per_distance_attention(q, k, v, t5_bias),
        **deberta_candidates(inputs),
        **relative_candidates(inputs),
        **newer_candidates(inputs),
    }


def materialised_bias_attention(encoding, q, k, v, positions: torch.Tensor) -> torch.Tensor:
    """What libraries do: the encoding's ``[h, s, s]`` bias plus a causal −inf mask as a float attn_mask
    to SDPA. Built here, not through MultiHeadAttention, whose sdpa backend takes the strided path for
    a bias of the distance alone."""
    bias = encoding.bias(positions, positions)  # [h, s, s]
    causal = torch.ones(bias.shape[-2:], dtype=torch.bool).tril()
    mask = bias.to(q.dtype).masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sdpa_layers(encodings: dict, heads: int, d_head: int) -> dict:
    """One ``MultiHeadAttention(backend="sdpa")`` per encoding, whose ``attend`` the rows call."""
    from posenc.attention import MultiHeadAttention

    return {
        name: MultiHeadAttention(heads * d_head, heads, encoding=encoding, backend="sdpa")
        for name, encoding in encodings.items()
    }


def _eager_flex(layer, q, k, v, positions) -> torch.Tensor:
    """flex_attention uncompiled (torch's reference path: scores materialised), same score_mod and mask."""
    from torch.nn.attention.flex_attention import flex_attention

    from posenc.attention import _causal_block_mask

    score_mod = layer.encoding.score_mod(q_positions=positions, k_positions=positions)
    block_mask = _causal_block_mask(q.shape[2], k.shape[2], q.device.type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile"
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


def reference(inputs: dict, bias: str) -> torch.Tensor:
    """softmax(q·kᵀ/√d + bias + causal mask)·v in float64, one head at a time; ``[b, h, s, d]``."""
    if bias == "deberta":
        return deberta_reference(inputs)
    if bias in ("shaw", "shaw_values", "transformer_xl"):
        return relative_reference(inputs, bias)
    if bias in ("fire", "kerple", "sandwich", "cope"):
        return newer_reference(inputs, bias)
    q, k, v = (inputs[name].double() for name in ("q", "k", "v"))
    s, d = q.shape[2], q.shape[3]
    i = torch.arange(s)
    distance = i[:, None] - i[None, :]  # [s, s]: i − j
    future = distance < 0
    buckets = inputs["t5"].buckets(-distance) if bias == "t5" else None  # [s, s]
    out = torch.empty_like(q)
    for head in range(q.shape[1]):
        scores = q[:, head] @ k[:, head].transpose(-1, -2) / math.sqrt(d)  # [b, s, s]
        if bias == "alibi":
            scores = scores - inputs["alibi"].slopes[head].double() * distance.double()
        elif bias == "t5":
            scores = scores + inputs["t5"].table.detach()[:, head].double()[buckets]
        out[:, head] = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v[:, head]
    return out


def check(name: str, got: torch.Tensor, expected: torch.Tensor, seq_len: int) -> float:
    """max |got − expected|; AssertionError beyond :data:`TOLERANCE` (or the row's own, NaN included)."""
    error = float((got.double() - expected).abs().max())
    tolerance = ROW_TOLERANCE.get(name, TOLERANCE)
    if not error <= tolerance:
        raise AssertionError(
            f"{name} disagrees with the float64 reference by {error:.3g} > {tolerance:g} (s={seq_len})"
        )
    return error


def folded_alibi(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    """ALiBi as m·j (softmax drops −m·i) in an extra channel of q·k: q' = [q, √d], k' = [k, m·j]."""
    b, h, s, d = q.shape
    extra = (slopes.double()[:, None] * torch.arange(s, dtype=torch.float64)).to(q.dtype)  # [h, s]
    q_ = torch.cat((q, q.new_full((b, h, s, 1), math.sqrt(d))), dim=-1)  # [b, h, s, d + 1]
    k_ = torch.cat((k, extra.expand(b, h, s)[..., None]), dim=-1)
    return F.scaled_dot_product_attention(q_, k_, v, is_causal=True, scale=1 / math.sqrt(d))


def block_centred_alibi(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, block: int = DEFAULT_BLOCK
) -> torch.Tensor:
    """:func:`folded_alibi` with the channel m·(j − e) per query block ending at e (keys 0 … e)."""
    b, h, s, d = q.shape
    q_ = torch.cat((q, q.new_full((b, h, s, 1), math.sqrt(d))), dim=-1)  # [b, h, s, d + 1]
    out = torch.empty_like(q)
    for start in range(0, s, block):
        end = min(start + block, s)  # keys 0 … end − 1
        j = torch.arange(end, dtype=torch.float64) - (end - 1)
        extra = (slopes.double()[:, None] * j).to(q.dtype)  # [h, end]
        k_ = torch.cat((k[:, :, :end], extra.expand(b, h, end)[..., None]), dim=-1)
        causal = torch.ones(end - start, end, dtype=torch.bool).tril(start)  # [rows, end]
        out[:, :, start:end] = F.scaled_dot_product_attention(
            q_[:, :, start:end], k_, v[:, :, :end], attn_mask=causal, scale=1 / math.sqrt(d)
        )
    return out


# --- DeBERTa's disentangled attention (c2p + p2c terms) ------------------------------------------

DEBERTA = "posenc DeBERTa c2p + p2c terms (sdpa)"
DEBERTA_NAIVE = "DeBERTa naive: [b, h, i, j, d] gathered"
#: DeBERTa-v3's relative positions: 256 log buckets per side reaching distance 512, a shared key.
DEBERTA_BUCKETS, DEBERTA_MAX_RELATIVE = 256, 512
#: The naive row runs only where its [b, h, i, j, d] float32 tensor fits in this (s=1024: 2 GiB).
NAIVE_LIMIT_BYTES = 2 << 30
DEBERTA_CANDIDATES: dict[str, tuple[str, str]] = {
    DEBERTA: (
        "deberta",
        "MultiHeadAttention(backend='sdpa').attend with DisentangledAttention (S=256, shared key): "
        "q·K_rᵀ [b, h, i, 2S] and k·Q_rᵀ gathered at the bucket of i − j, as a float attn_mask",
    ),
    DEBERTA_NAIVE: (
        "deberta",
        "K_r and Q_r gathered for every pair, [b, h, i, j, d], multiplied by q and k and summed, then SDPA; "
        f"not run where that tensor exceeds {NAIVE_LIMIT_BYTES >> 30} GiB",
    ),
}
CANDIDATES.update(DEBERTA_CANDIDATES)


def deberta_layer(heads: int, d_head: int):
    """The attention layer whose projections and DisentangledAttention the DeBERTa rows use, drawn from a
    fixed seed (the same at every call): relative embeddings N(0, 1) and weights N(0, 1/d_model), so the
    relative queries and keys are of unit size like q and k and each logit term weighs as much as q·k."""
    from posenc.attention import MultiHeadAttention
    from posenc.encodings.deberta import DisentangledAttention

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        d_model = heads * d_head
        encoding = DisentangledAttention(
            d_model, heads, position_buckets=DEBERTA_BUCKETS, max_relative_positions=DEBERTA_MAX_RELATIVE
        )
        layer = MultiHeadAttention(d_model, heads, encoding=encoding, backend="sdpa", bias=True)
        with torch.no_grad():
            for parameter in layer.parameters():
                parameter.normal_(0, 1 / math.sqrt(d_model))
            encoding.relative_embeddings.normal_(0, 1)
            if encoding.norm is not None:  # DeBERTa-v3's LayerNorm as initialised: weight 1, bias 0
                encoding.norm.reset_parameters()
    return layer.eval()


def deberta_candidates(inputs: dict) -> dict[str, Callable[[], torch.Tensor]]:
    """The DeBERTa rows: posenc's terms through attention, and the naive materialised gather."""
    q, k, v, positions = inputs["q"], inputs["k"], inputs["v"], inputs["positions"]
    layer = deberta_layer(q.shape[1], q.shape[3])
    return {
        DEBERTA: lambda: layer.attend(q, k, v, positions, positions),
        DEBERTA_NAIVE: lambda: naive_deberta(layer, q, k, v, positions),
    }


def naive_deberta(layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
    """DeBERTa's causal attention as written: the relative key and query of every pair gathered,
    ``[h, i, j, d]``, times q and k, ``[b, h, i, j, d]``, summed over d."""
    encoding = layer.encoding
    pos_query, pos_key = encoding.position_heads(layer.project_heads)  # [h, 2S, d] each
    index = encoding.relative_index(positions, positions)  # [i, j]
    c2p = (q.unsqueeze(3) * pos_key[:, index]).sum(-1)  # [b, h, i, j, d] -> [b, h, i, j]
    p2c = (k.unsqueeze(2) * pos_query[:, index]).sum(-1)  # k_j·Q_r[δ(i, j)]: [b, h, i, j]
    scores = (q @ k.transpose(-1, -2) + c2p + p2c) / math.sqrt(q.shape[-1] * encoding.scale_factor)
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v  # [b, h, i, d]


def deberta_reference(inputs: dict) -> torch.Tensor:
    """DeBERTa's causal attention in float64, one head at a time: softmax((q·kᵀ + q·K_r[δ] + k·Q_r[δ]) /
    √(3d) + mask)·v with δ(i, j) the table row of the bucket of i − j; ``[b, h, s, d]``."""
    q, k, v = (inputs[name].double() for name in ("q", "k", "v"))
    layer = copy.deepcopy(deberta_layer(q.shape[1], q.shape[3])).double()
    encoding = layer.encoding
    with torch.no_grad():
        pos_query, pos_key = encoding.position_heads(layer.project_heads)  # [h, 2S, d] float64
    index = encoding.relative_index(inputs["positions"], inputs["positions"])  # [s, s]
    future = torch.ones(index.shape, dtype=torch.bool).triu(1)
    scale = math.sqrt(q.shape[-1] * encoding.scale_factor)
    out = torch.empty_like(q)
    for head in range(q.shape[1]):
        q_h, k_h = q[:, head], k[:, head]  # [b, s, d]
        c2p = (q_h @ pos_key[head].T)[:, torch.arange(index.shape[0])[:, None], index]  # [b, i, j]
        p2c = (k_h @ pos_query[head].T)[:, torch.arange(index.shape[1])[None, :], index]  # [b, i, j]
        scores = (q_h @ k_h.transpose(-1, -2) + c2p + p2c) / scale
        out[:, head] = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v[:, head]
    return out


def deberta_not_run(
    seq_len: int, heads: int = HEADS, d_head: int = D_HEAD, batch: int = BATCH
) -> dict[str, str]:
    """The DeBERTa rows not run at ``seq_len``, and why: the naive one where [b, h, i, j, d] is too large."""
    size = batch * heads * seq_len * seq_len * d_head * 4  # bytes of one float32 [b, h, i, j, d]
    if size <= NAIVE_LIMIT_BYTES:
        return {}
    return {DEBERTA_NAIVE: f"not run: its [b, h, i, j, d] tensor would hold {size / 2**30:g} GiB"}


# --- Shaw et al. and Transformer-XL: relative terms that read the query -----------------------------

SHAW = "posenc Shaw key term (sdpa)"
SHAW_VALUES = "posenc Shaw keys + values (eager)"
SHAW_NAIVE = "Shaw naive: [b, h, i, j, d] gathered"
TRANSFORMER_XL = "posenc Transformer-XL terms (sdpa)"
TRANSFORMER_XL_NAIVE = "Transformer-XL naive: [b, h, i, j, d] gathered"
#: Shaw et al.'s clipping distance (§4: k = 16).
SHAW_MAX_DISTANCE = 16
#: Lengths the sweep tries first for the naive rows, below the sweep's own (their [b, h, i, j, d] float32
#: tensor alone is 32 GiB at s=4096, so the longest s within 16 GiB lies below it).
NAIVE_SWEEP: tuple[int, ...] = (1024, 1536, 2048, 3072)
RELATIVE_CANDIDATES: dict[str, tuple[str, str]] = {
    SHAW: (
        "shaw",
        f"MultiHeadAttention(backend='sdpa').attend with ShawRelativePosition (k={SHAW_MAX_DISTANCE}): "
        "q·w^Kᵀ [b, h, i, 2k+1] gathered at clip(j − i, k) + k, as a float attn_mask",
    ),
    SHAW_VALUES: (
        "shaw_values",
        "the same with relative values: the weights summed per clipped distance (scatter_add, "
        "[b, h, i, 2k+1]) times w^V; attention's eager path (the weights are needed)",
    ),
    SHAW_NAIVE: (
        "shaw",
        "w^K gathered for every pair [i, j, d], times q as [b, h, i, j, d] and summed, then softmax; "
        f"not run where that tensor exceeds {NAIVE_LIMIT_BYTES >> 30} GiB",
    ),
    TRANSFORMER_XL: (
        "transformer_xl",
        "MultiHeadAttention(backend='sdpa').attend with TransformerXLRelative: (q + v)·W_{k,R}R per distance "
        "[b, h, i, 2s−1], the rel-shift view, + u·k_j, as a float attn_mask",
    ),
    TRANSFORMER_XL_NAIVE: (
        "transformer_xl",
        "W_{k,R}R_{i−j} gathered for every pair [h, i, j, d], times q + v as [b, h, i, j, d] and summed, "
        f"+ u·k_j, then softmax; not run where that tensor exceeds {NAIVE_LIMIT_BYTES >> 30} GiB",
    ),
}
CANDIDATES.update(RELATIVE_CANDIDATES)
RELATIVE_NAIVE = (SHAW_NAIVE, TRANSFORMER_XL_NAIVE)


def relative_encodings(heads: int, d_head: int) -> dict:
    """The encodings of the Shaw and Transformer-XL rows, drawn from a fixed seed (the same at every
    call): Shaw's tables N(0, 1), W_{k,R} N(0, 1/d_model), u and v N(0, 1), so the terms are of the size
    of q·k/√d."""
    from posenc.encodings.shaw import ShawRelativePosition
    from posenc.encodings.transformer_xl import TransformerXLRelative

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encodings = {
            "shaw": ShawRelativePosition(d_head, max_distance=SHAW_MAX_DISTANCE),
            "shaw_values": ShawRelativePosition(d_head, max_distance=SHAW_MAX_DISTANCE, values=True),
            "transformer_xl": TransformerXLRelative(heads * d_head, heads),
        }
        with torch.no_grad():
            for encoding in encodings.values():
                for parameter_name, parameter in encoding.named_parameters():
                    std = (heads * d_head) ** -0.5 if parameter_name == "r_proj" else 1.0
                    parameter.normal_(0, std)
    return encodings


def relative_candidates(inputs: dict) -> dict[str, Callable[[], torch.Tensor]]:
    """The Shaw and Transformer-XL rows: posenc's terms through attention, and the naive gathers."""
    q, k, v, positions = inputs["q"], inputs["k"], inputs["v"], inputs["positions"]
    heads, d_head = q.shape[1], q.shape[3]
    encodings = relative_encodings(heads, d_head)
    layers = sdpa_layers(encodings, heads, d_head)
    return {
        SHAW: lambda: layers["shaw"].attend(q, k, v, positions, positions),
        SHAW_VALUES: lambda: layers["shaw_values"].attend(q, k, v, positions, positions),
        SHAW_NAIVE: lambda: naive_shaw(encodings["shaw"], q, k, v, positions),
        TRANSFORMER_XL: lambda: layers["transformer_xl"].attend(q, k, v, positions, positions),
        TRANSFORMER_XL_NAIVE: lambda: naive_transformer_xl(encodings["transformer_xl"], q, k, v, positions),
    }


def _causal_softmax(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v  # [b, h, i, d]


def naive_shaw(encoding, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
    """Shaw et al.'s causal attention as eq. (4) reads: a^K_ij gathered for every pair ``[i, j, d]``,
    q_i·a^K_ij as a product ``[b, h, i, j, d]`` summed over d."""
    pairs = encoding.key_table[encoding.rows(positions, positions)].to(q.dtype)  # [i, j, d]
    relative = (q.unsqueeze(3) * pairs).sum(-1)  # [b, h, i, j, d] -> [b, h, i, j]
    return _causal_softmax((q @ k.transpose(-1, -2) + relative) / math.sqrt(q.shape[-1]), v)


def naive_transformer_xl(
    encoding, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
):
    """Transformer-XL's causal attention with W_{k,R}R_{i−j} gathered for every pair ``[h, i, j, d]`` and
    (q_i + v)·it as a product ``[b, h, i, j, d]`` summed over d, + u·k_j."""
    s = positions.shape[0]
    per_distance = encoding.projected(
        torch.arange(s - 1, -s, -1), q.dtype
    )  # [h, d, 2s − 1]: s − 1 … −(s − 1)
    column = (s - 1) - (positions[:, None] - positions[None, :])  # [i, j]
    pairs = per_distance.transpose(-1, -2)[:, column]  # [h, i, j, d]
    query = q + encoding.v.to(q.dtype).unsqueeze(-2)  # q_i + v: [b, h, i, d]
    relative = (query.unsqueeze(3) * pairs).sum(-1) + encoding.key_bias_term(k, q.shape[1])  # [b, h, i, j]
    return _causal_softmax((q @ k.transpose(-1, -2) + relative) / math.sqrt(q.shape[-1]), v)


def relative_reference(inputs: dict, bias: str) -> torch.Tensor:
    """The Shaw or Transformer-XL row's causal attention in float64, one head at a time; ``[b, h, s, d]``.

    Shaw: + q_i·w^K[clip(j − i, 16) + 16] / √d (and Σ_j α_ij w^V[…] for ``"shaw_values"``);
    Transformer-XL: + ((q_i + v)·W_{k,R}R_{i−j} + u·k_j) / √d, R the sinusoid at width h·d.
    """
    q, k, v = (inputs[name].double() for name in ("q", "k", "v"))
    b, heads, s, d = q.shape
    encoding = copy.deepcopy(relative_encodings(heads, d)[bias]).double()
    position = inputs["positions"]
    distance = position[:, None] - position[None, :]  # [s, s]: i − j
    rows = torch.arange(s)[:, None]
    future = distance < 0
    out = torch.empty_like(q)
    with torch.no_grad():
        if bias == "transformer_xl":
            codes = sinusoidal_table(
                torch.arange(s - 1, -s, -1), heads * d, dtype=torch.float64
            )  # [2s−1, h·d]
            projected = (codes @ encoding.r_proj.T).view(2 * s - 1, heads, d)  # W_{k,R}R: [2s − 1, h, d]
        for head in range(heads):
            q_h, k_h, v_h = q[:, head], k[:, head], v[:, head]  # [b, s, d]
            scores = q_h @ k_h.transpose(-1, -2)  # [b, i, j]
            if bias == "transformer_xl":
                per_distance = (q_h + encoding.v[head]) @ projected[:, head].T  # [b, i, 2s − 1]
                scores = (
                    scores + per_distance[:, rows, (s - 1) - distance] + (k_h @ encoding.u[head])[:, None]
                )
            else:
                row = (-distance).clamp(-SHAW_MAX_DISTANCE, SHAW_MAX_DISTANCE) + SHAW_MAX_DISTANCE  # [i, j]
                scores = scores + (q_h @ encoding.key_table.T)[:, rows, row]
            weights = (scores / math.sqrt(d)).masked_fill(future, float("-inf")).softmax(dim=-1)
            out[:, head] = weights @ v_h
            if bias == "shaw_values":
                per_row = torch.zeros(b, s, 2 * SHAW_MAX_DISTANCE + 1, dtype=torch.float64)
                per_row.scatter_add_(-1, row.expand(b, s, s), weights)  # Σ_j α_ij per clipped distance
                out[:, head] += per_row @ encoding.value_table
    return out


def relative_not_run(
    seq_len: int, heads: int = HEADS, d_head: int = D_HEAD, batch: int = BATCH
) -> dict[str, str]:
    """The naive Shaw and Transformer-XL rows not run at ``seq_len``: where [b, h, i, j, d] is too large."""
    size = batch * heads * seq_len * seq_len * d_head * 4  # bytes of one float32 [b, h, i, j, d]
    if size <= NAIVE_LIMIT_BYTES:
        return {}
    return {
        name: f"not run: its [b, h, i, j, d] tensor would hold {size / 2**30:g} GiB"
        for name in RELATIVE_NAIVE
    }


# --- The newer biases (FIRE, Kerple, Sandwich) and CoPE -------------------------------------------

FIRE = "posenc FIRE bias (sdpa)"
KERPLE = "posenc Kerple log bias (sdpa, per distance)"
KERPLE_MATERIALISED = "SDPA + Kerple log bias (materialised)"
SANDWICH = "posenc Sandwich bias (sdpa, per distance)"
SANDWICH_MATERIALISED = "SDPA + Sandwich bias (materialised)"
COPE = "posenc CoPE terms (sdpa)"
COPE_NAIVE = "CoPE naive: [b, h, i, j, d] interpolated"
#: CoPE's table: counts clamp at COPE_POSITIONS − 1 (the paper bounds them by p_max).
COPE_POSITIONS = 64
NEWER_CANDIDATES: dict[str, tuple[str, str]] = {
    FIRE: (
        "fire",
        "MultiHeadAttention(backend='sdpa').attend with FIRE (L₀ = 1024): the [h, s, s] bias of "
        "its MLP over the progressively interpolated distance, as a float attn_mask",
    ),
    KERPLE: (
        "kerple",
        "MultiHeadAttention(backend='sdpa').attend with Kerple (log): a bias of the distance "
        "alone, per distance through the strided-table path (no s×s tensor)",
    ),
    KERPLE_MATERIALISED: ("kerple", "Kerple's [h, s, s] bias plus the causal −inf mask as a float attn_mask"),
    SANDWICH: (
        "sandwich",
        "MultiHeadAttention(backend='sdpa').attend with Sandwich: a bias of the distance "
        "alone, per distance through the strided-table path",
    ),
    SANDWICH_MATERIALISED: (
        "sandwich",
        "Sandwich's [h, s, s] bias plus the causal −inf mask as a float attn_mask",
    ),
    COPE: (
        "cope",
        f"MultiHeadAttention(backend='sdpa').attend with CoPE ({COPE_POSITIONS} positions): gates "
        "σ(q·k), counts by a reversed cumulative sum, q·e per table row [b, h, i, npos] interpolated by two "
        "gathers, as a float attn_mask",
    ),
    COPE_NAIVE: (
        "cope",
        "the same counts, the embedding interpolated for every pair [b, h, i, j, d] and "
        f"multiplied by q; not run where that tensor exceeds {NAIVE_LIMIT_BYTES >> 30} GiB",
    ),
}
CANDIDATES.update(NEWER_CANDIDATES)
#: Rows checked to another bound than :data:`TOLERANCE`: CoPE's counts add up float32 gates σ(q·k/√d),
#: each rounded, and the interpolation multiplies a count's error by the step between two table
#: logits (about 10 here), so any float32 CoPE, the naive one as much as posenc's, ends about 1e-4 from
#: float64.
ROW_TOLERANCE: dict[str, float] = {COPE: 3e-4, COPE_NAIVE: 3e-4}


def newer_encodings(heads: int, d_head: int) -> dict:
    """FIRE, Kerple (log), Sandwich and CoPE for the rows, each from a fixed seed; FIRE's and Kerple's
    parameters as initialised, CoPE's table N(0, 1) so its term is the size of q·k."""
    import posenc

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encodings = {
            "fire": posenc.build("fire", n_heads=heads, threshold=float(SEQ_LENS[0])),
            "kerple": posenc.build("kerple", n_heads=heads),
            "sandwich": posenc.build("sandwich", n_heads=heads),
            "cope": posenc.build("cope", d_head=d_head, npos_max=COPE_POSITIONS),
        }
        with torch.no_grad():
            encodings["cope"].table.normal_(0, 1)
    return {name: encoding.eval() for name, encoding in encodings.items()}


def newer_candidates(inputs: dict) -> dict[str, Callable[[], torch.Tensor]]:
    """The newer biases' and CoPE's rows."""
    q, k, v, positions = inputs["q"], inputs["k"], inputs["v"], inputs["positions"]
    heads, d_head = q.shape[1], q.shape[3]
    encodings = newer_encodings(heads, d_head)
    layers = sdpa_layers(encodings, heads, d_head)

    def attend(name: str) -> Callable[[], torch.Tensor]:
        return lambda: layers[name].attend(q, k, v, positions, positions)

    def materialised(name: str) -> Callable[[], torch.Tensor]:
        return lambda: materialised_bias_attention(encodings[name], q, k, v, positions)

    return {
        FIRE: attend("fire"),
        KERPLE: attend("kerple"),
        KERPLE_MATERIALISED: materialised("kerple"),
        SANDWICH: attend("sandwich"),
        SANDWICH_MATERIALISED: materialised("sandwich"),
        COPE: attend("cope"),
        COPE_NAIVE: lambda: naive_cope(encodings["cope"], q, k, v),
    }


def naive_cope(encoding, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """CoPE's causal attention with e[p_ij] interpolated for every pair ``[b, h, i, j, d]`` and multiplied
    by q_i (Golovneva et al. 2024, eq. 3–5, the embedding before the dot product)."""
    table = encoding.table.to(q.dtype)  # [npos, d]
    counts = encoding.counted_positions(q, k)  # [b, h, i, j]
    floor = counts.floor()
    upper = (floor + 1).clamp(max=table.shape[0] - 1).long()
    weight = (counts - floor).unsqueeze(-1)  # [b, h, i, j, 1]
    embedded = table[floor.long()] * (1 - weight) + table[upper] * weight  # [b, h, i, j, d]
    relative = (q.unsqueeze(3) * embedded).sum(-1)  # [b, h, i, j]
    return _causal_softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + relative, v)


def newer_reference(inputs: dict, bias: str) -> torch.Tensor:
    """The newer rows' causal attention in float64, one head at a time: softmax(q·kᵀ/√d + B_ij + mask)·v
    with the encoding's bias in float64, or for CoPE + q_i·e[p_ij] (interpolated) with the counts of
    σ(q·k/√d) in float64; ``[b, h, s, d]``."""
    q, k, v = (inputs[name].double() for name in ("q", "k", "v"))
    b, heads, s, d = q.shape
    encoding = copy.deepcopy(newer_encodings(heads, d)[bias]).double()
    positions = inputs["positions"]
    future = torch.ones(s, s, dtype=torch.bool).triu(1)
    out = torch.empty_like(q)
    with torch.no_grad():
        if bias == "cope":
            table = encoding.table.double()  # [npos, d]
            for head in range(heads):
                q_h, k_h = q[:, head : head + 1], k[:, head : head + 1]  # [b, 1, s, d]
                counts = encoding.counted_positions(q_h, k_h)[:, 0]  # [b, i, j], float64
                floor = counts.floor()
                weight = counts - floor
                upper = (floor + 1).clamp(max=table.shape[0] - 1).long()
                low_logit = q_h[:, 0] @ table.T  # [b, i, npos]: q_i·e[n]
                z_low = low_logit.gather(-1, floor.long())
                z_high = low_logit.gather(-1, upper)
                scores = (
                    q_h[:, 0] @ k_h[:, 0].transpose(-1, -2) / math.sqrt(d)
                    + z_low * (1 - weight)
                    + z_high * weight
                )
                out[:, head] = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v[:, head]
            return out
        bias_table = encoding.bias(positions, positions).double()  # [h, s, s]
    for head in range(heads):
        scores = q[:, head] @ k[:, head].transpose(-1, -2) / math.sqrt(d) + bias_table[head]
        out[:, head] = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v[:, head]
    return out


def newer_not_run(
    seq_len: int, heads: int = HEADS, d_head: int = D_HEAD, batch: int = BATCH
) -> dict[str, str]:
    """CoPE's naive row where its [b, h, i, j, d] tensor exceeds :data:`NAIVE_LIMIT_BYTES`."""
    size = batch * heads * seq_len * seq_len * d_head * 4
    if size <= NAIVE_LIMIT_BYTES:
        return {}
    return {COPE_NAIVE: f"not run: its [b, h, i, j, d] tensor would hold {size / 2**30:g} GiB"}


def sweep_lengths(name: str, sizes: Sequence[int]) -> list[int]:
    """The lengths the sweep tries for ``name``: ``sizes``, after :data:`NAIVE_SWEEP`'s shorter ones for
    the naive rows."""
    if name not in RELATIVE_NAIVE or not sizes:
        return list(sizes)
    return [size for size in NAIVE_SWEEP if size < min(sizes)] + list(sizes)


def _not_run(seq_len: int, names: Sequence[str]) -> dict[str, str]:
    """The candidates of ``names`` not run at ``seq_len``, and why."""
    reasons = deberta_not_run(seq_len) | relative_not_run(seq_len) | newer_not_run(seq_len)
    return {name: reason for name, reason in reasons.items() if name in names}


def selected(only: str | None) -> list[str]:
    """The candidates whose name ``only`` (a regular expression) finds, with unbiased SDPA, the ratios'
    reference, always; every candidate without ``only``.

    Raises:
        ValueError: an expression that does not compile or finds no candidate.
    """
    if only is None:
        return list(CANDIDATES)
    try:
        pattern = re.compile(only)
    except re.error as error:
        raise ValueError(f"--only {only!r} is not a regular expression: {error}") from None
    names = [name for name in CANDIDATES if pattern.search(name)]
    if not names:
        raise ValueError(f"--only {only!r} matches no candidate; candidates: {', '.join(CANDIDATES)}")
    return [UNBIASED, *(name for name in names if name != UNBIASED)]


def _case(
    seq_len: int, rounds: int, compile: bool, memory: dict | None, names: Sequence[str] = tuple(CANDIDATES)
) -> tuple[dict, dict]:
    """Timings of the candidates ``names`` at one length (after their check), and the extra-channel
    precision."""
    torch._dynamo.reset()  # each length compiles afresh; the recompile limit is never reached
    inputs = _inputs(seq_len)
    not_run = _not_run(seq_len, names)
    runs = {
        name: call
        for name, call in candidates(inputs, compile=compile).items()
        if name in names and name not in not_run
    }
    biases = dict.fromkeys(["alibi", *(CANDIDATES[name][0] for name in runs)])
    expected = {bias: reference(inputs, bias) for bias in biases}
    errors = {}
    for name, call in runs.items():  # compiles the flex candidates before any timing
        errors[name] = check(name, call(), expected[CANDIDATES[name][0]], seq_len)
    timings = time_alternating(runs, rounds=rounds, warmup=1)
    floor = timings[UNBIASED].median_ms
    slopes = inputs["alibi"].slopes
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    precision = {
        "seq_len": seq_len,
        FOLDED: float((folded_alibi(q, k, v, slopes).double() - expected["alibi"]).abs().max()),
        CENTRED: float((block_centred_alibi(q, k, v, slopes).double() - expected["alibi"]).abs().max()),
    }
    case = {
        "seq_len": seq_len,
        "windows": decay_windows(q, k, v, slopes),
        "timings": [
            {
                **t.as_dict(),
                "vs_sdpa": t.median_ms / floor,
                "max_abs_error_vs_float64": errors[t.name],
                "peak_extra_mib": None if memory is None else memory.get(t.name),
            }
            for t in timings.values()
        ],
        "not_timed": ({} if compile else {"compiled flex_attention": "not requested: flex runs uncompiled"})
        | not_run,
    }
    return case, precision


# ----------------------------------------------------------------------------------------------
# Memory, in subprocesses


def _child(spec: dict) -> dict:
    """Run in a fresh interpreter: one candidate at one length; its peak extra resident memory."""
    return_freed_memory()
    if spec["limit_bytes"] is not None:
        address_space = status_kib("VmSize") << 10
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (address_space + spec["limit_bytes"], hard))
    torch.set_num_threads(spec["threads"])
    baseline_kib = status_kib("VmRSS")
    try:
        with torch.no_grad():
            inputs = _inputs(spec["seq_len"])
            call = candidates(inputs, compile=spec["compile"])[spec["name"]]
            if spec["warm"]:  # compile and fill caches first; measure a steady call
                call()
                gc.collect()
            reset_peak()  # VmHWM := the current resident set
            if spec["warm"]:  # the resident set at the reset: the peak can only grow from it
                baseline_kib = status_kib("VmHWM")
            start = time.perf_counter()
            out = call()
            seconds = time.perf_counter() - start
            del out
    except (RuntimeError, MemoryError) as error:  # an allocation refused under RLIMIT_AS
        return {"ok": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
    return {
        "ok": True,
        "peak_extra_mib": resident_extra_mib(baseline_kib),
        "seconds": seconds,
    }


def measure(
    name: str,
    seq_len: int,
    *,
    warm: bool = True,
    compile: bool = True,
    limit_bytes: int | None = None,
    timeout: float | None = None,
) -> dict:
    """:func:`_child` in a fresh subprocess; {"ok": False, "error": …} when it fails or times out."""
    spec = {
        "name": name,
        "seq_len": seq_len,
        "warm": warm,
        "compile": compile,
        "limit_bytes": limit_bytes,
        "threads": torch.get_num_threads(),
    }
    code = (
        "import json, sys; from posenc.bench.attention import _child; "
        "print('\\0' + json.dumps(_child(json.loads(sys.argv[1]))))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"not finished within {timeout:g} s"}
    marked = [line for line in done.stdout.splitlines() if line.startswith("\0")]
    if done.returncode != 0 or not marked:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"ok": False, "error": f"exit status {done.returncode}: {tail[:160]}"}
    return json.loads(marked[-1][1:])


def sweep(names: Sequence[str], sizes: Sequence[int], *, compile: bool = True) -> dict:
    """Per candidate: each length in order until the first that fails within :data:`MEMORY_LIMIT_BYTES`."""
    results: dict[str, dict] = {}
    for name in names:
        runs = []
        for seq_len in sweep_lengths(name, sizes):
            outcome = measure(
                name,
                seq_len,
                warm=False,
                compile=compile,
                limit_bytes=MEMORY_LIMIT_BYTES,
                timeout=SWEEP_TIMEOUT_S,
            )
            runs.append({"seq_len": seq_len, **outcome})
            if not outcome["ok"]:
                break
        completed = [r["seq_len"] for r in runs if r["ok"]]
        results[name] = {
            "runs": runs,
            "longest_completed": max(completed) if completed else None,
            "stopped_by": None if runs[-1]["ok"] else runs[-1]["error"],
        }
    return results


# ----------------------------------------------------------------------------------------------


def _timed_cases(
    seq_lens: Sequence[int],
    rounds: int,
    compile: bool,
    memory: bool,
    names: Sequence[str] = tuple(CANDIDATES),
) -> tuple[list[dict], list[dict]]:
    """Per length: the memory of each candidate (if asked), then the checked and timed case, and the
    precision of the extra-channel variants."""
    cases, precision = [], []
    with torch.no_grad():
        for seq_len in seq_lens:
            peak = (
                {
                    name: measure(name, seq_len, compile=compile).get("peak_extra_mib")
                    for name in names
                    if name not in _not_run(seq_len, names)
                }
                if memory
                else None
            )
            case, study = _case(seq_len, rounds, compile, peak, names)
            cases.append(case)
            precision.append(study)
    return cases, precision


def run(
    seq_lens: Sequence[int] = SEQ_LENS,
    rounds: int = 9,
    compile: bool = True,
    reuse_memory: bool = True,
    memory: bool = True,
    sweep_sizes: Sequence[int] = SWEEP,
    only: str | None = None,
) -> dict:
    """Timings, errors and memory of every candidate (or those :func:`selected` by ``only``) at every
    length, and the sweep; JSON-ready.

    Args:
        seq_lens: sequence lengths s (b=1, h=8, d_head=64).
        rounds: alternating rounds per length (after 1 warm-up round and the check).
        compile: compiled flex_attention (as ``MultiHeadAttention``); False runs flex uncompiled.
        reuse_memory: raise glibc's mmap and trim thresholds for the timings (see
            :func:`posenc.bench.rope.steady_malloc`).
        memory: measure each candidate's peak extra memory (a subprocess per candidate and length).
        sweep_sizes: lengths for the 16 GiB sweep (empty: no sweep).
    """
    for seq_len in (*seq_lens, *sweep_sizes):
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"sequence lengths must be positive integers, got {seq_len!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    malloc = (
        "glibc thresholds raised (freed blocks reused)" if reuse_memory and steady_malloc() else "default"
    )
    started = time.perf_counter()
    names = selected(only)
    cases, precision = _timed_cases(seq_lens, rounds, compile, memory, names)
    timed_s = time.perf_counter() - started
    sweep_results = sweep(names, sweep_sizes, compile=compile) if sweep_sizes else {}
    return {
        "config": {
            "batch": BATCH,
            "heads": HEADS,
            "d_head": D_HEAD,
            "dtype": "float32",
            "causal": True,
            "grad": "torch.no_grad",
            "t5_table_std": T5_TABLE_STD,
        },
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "rounds": rounds,
        "malloc": malloc,
        "tolerance": TOLERANCE,
        "row_tolerance": ROW_TOLERANCE,
        "only": only,
        "candidates": {name: what for name, (_, what) in CANDIDATES.items()},
        "cases": cases,
        "extra_channel_precision": precision,
        "timing_and_memory_seconds": timed_s,
        "sweep": {
            "limit_bytes": MEMORY_LIMIT_BYTES,
            "sizes": list(sweep_sizes),
            "timeout_s": SWEEP_TIMEOUT_S,
            "results": sweep_results,
        },
    }


# ----------------------------------------------------------------------------------------------
# GPU: `posenc bench attention --device cuda`

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
    expected = {bias: reference(inputs["cpu"], bias) for bias in ("none", "alibi", "t5")}
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
