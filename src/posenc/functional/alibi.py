"""ALiBi attention biases (Press et al., 2022, https://arxiv.org/abs/2108.12409): a head-specific slope times distance.

bias[h, i, j] = −m_h·(i − j)     causal form, query i, key j (keys j > i get a positive value;
                                 causal attention masks them)
bias[h, i, j] = −m_h·|i − j|     symmetric form, for bidirectional attention

Two slope rules are in use:

- the paper's (and BLOOM's): for the largest power of two n ≤ H, m_k = 2^(−8k/n), k = 1 … n; when the
  head count H is not a power of two, the odd-indexed slopes of 2n, 2^(−8k/(2n)) for k = 1, 3, 5, …,
  follow until there are H.
- MPT's ``alibi_bias_max`` = B: for the smallest power of two n₂ ≥ H, m_k = 2^(−k·B/n₂), k = 1 … n₂;
  when n₂ ≠ H the slopes are reordered as (m₂, m₄, …, m₁, m₃, …) and the first H kept.

With B = 8 and a power-of-two head count both rules give the same slopes.

Notation used for tensor shapes: b batch, h heads, i query positions, j key positions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from posenc._validation import (  # noqa: F401  (MAX_ABS_POSITION, check_distance_range: re-exported)
    MAX_ABS_POSITION,
    check_distance_range,
    check_float_dtype,
    check_int,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.kernels.per_distance import (
    DEFAULT_BLOCK,
    DEFAULT_WINDOW_TOLERANCE,
    decay_windows,
    per_distance_attention,
)

#: The paper's slope exponent: the slopes of n heads span 2^(−8/n) … 2^(−8).
PAPER_BIAS_MAX = 8.0


def _geometric_slopes(count: int, bias_max: float) -> torch.Tensor:
    """2^(−k·bias_max/count) for k = 1 … count, float64 ``[count]``."""
    k = torch.arange(1, count + 1, dtype=torch.float64)
    return torch.exp2(-(k * bias_max) / count)


def alibi_slopes(n_heads: int, *, bias_max: float | None = None) -> torch.Tensor:
    """The ALiBi slope of each head (Press et al., 2022, https://arxiv.org/abs/2108.12409, §3).

    Args:
        n_heads: number of attention heads H, any positive count.
        bias_max: ``None`` for the paper's rule (BLOOM's): 2^(−8k/n) for the largest power of two
            n ≤ H, then the odd-indexed slopes of 2n. A number B for MPT's ``alibi_bias_max`` rule:
            2^(−k·B/n₂) for the smallest power of two n₂ ≥ H, reordered (even-indexed k first)
            and cut to H when n₂ ≠ H.

    Returns:
        float64 ``[n_heads]``, head 0 first.

    Raises:
        TypeError: non-integer ``n_heads``, non-numeric ``bias_max``.
        ValueError: ``n_heads`` < 1, ``bias_max`` not positive and finite.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    if bias_max is None:
        closest = 1 << (n_heads.bit_length() - 1)  # largest power of two ≤ n_heads
        slopes = _geometric_slopes(closest, PAPER_BIAS_MAX)  # [closest]
        if closest == n_heads:
            return slopes
        extra = _geometric_slopes(2 * closest, PAPER_BIAS_MAX)[0::2]  # k = 1, 3, 5, … of 2n
        return torch.cat((slopes, extra[: n_heads - closest]))
    bias_max = check_positive_float("bias_max", bias_max)
    padded = 1 << (n_heads - 1).bit_length()  # smallest power of two ≥ n_heads
    slopes = _geometric_slopes(padded, bias_max)  # [padded]
    if padded == n_heads:
        return slopes
    return torch.cat((slopes[1::2], slopes[0::2]))[:n_heads]


def _head_slopes(slopes: torch.Tensor | int, bias_max: float | None) -> torch.Tensor:
    if isinstance(slopes, torch.Tensor):
        if bias_max is not None:
            raise ValueError(
                "bias_max sets the slopes: pass a head count as slopes together with bias_max, "
                f"not a slopes tensor (got bias_max={bias_max!r})"
            )
        if slopes.dim() != 1 or slopes.numel() == 0:
            raise ValueError(f"slopes must be a 1-d tensor [h] with h ≥ 1, got shape {tuple(slopes.shape)}")
        if slopes.dtype.is_complex or slopes.dtype == torch.bool:
            raise ValueError(f"slopes must be real numbers, got dtype {slopes.dtype}")
        slopes = slopes.detach().to(torch.float64)
        if not torch.compiler.is_compiling() and not torch.isfinite(slopes).all():
            raise ValueError(f"slopes must be finite, got {slopes.tolist()}")
        return slopes
    try:
        n_heads = check_int("slopes", slopes)
    except TypeError:
        raise TypeError(
            f"slopes must be a tensor [h] or an int head count, got {slopes!r} ({type(slopes).__name__})"
        ) from None
    if n_heads <= 0:
        raise ValueError(f"slopes as a head count must be positive, got {n_heads}")
    return alibi_slopes(n_heads, bias_max=bias_max)


def alibi_bias(
    q_positions: int | torch.Tensor | Iterable[int],
    k_positions: int | torch.Tensor | Iterable[int],
    slopes: torch.Tensor | int,
    *,
    symmetric: bool = False,
    bias_max: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The ALiBi bias added to the attention logits (Press et al., 2022, https://arxiv.org/abs/2108.12409).

    Causal: −m·(i − j) = m·(j − i), which is ≤ 0 for every key a causal query sees (j ≤ i); keys after
    the query get a positive value, which the causal mask removes. Symmetric: −m·|i − j|.
    Because softmax ignores a constant added to a row, the causal bias gives the same attention as
    m·j alone (BLOOM's and MPT's form): each row differs from it by −m·i.

    The distance is taken exactly from the integer positions, the product in float64, cast once.

    Args:
        q_positions: query positions ``[i]`` or ``[b, i]`` (an int n means 0 … n−1).
        k_positions: key positions ``[j]`` or ``[b, j]``.
        slopes: the slope of each head ``[h]`` (any real dtype, used as float64), or a head count H,
            in which case ``alibi_slopes(H, bias_max=bias_max)`` is used.
        symmetric: use −m·|i − j| instead of the causal −m·(i − j).
        bias_max: MPT's ``alibi_bias_max`` for the head-count form of ``slopes``; ``None`` is the paper's rule.
        dtype: output dtype (floating point).

    Returns:
        ``[h, i, j]`` when both positions are 1-d, ``[b, h, i, j]`` when either is ``[b, ·]``.

    Raises:
        ValueError: float, empty or >2-d positions, batch sizes that differ, ``bias_max`` together with a
            slopes tensor, a slopes tensor that is not 1-d, a non-positive head count.
        TypeError: ``slopes`` neither a tensor nor an int; a non-float dtype.
    """
    check_float_dtype("dtype", dtype)
    m = _head_slopes(slopes, bias_max)  # [h] float64
    q, k = pair_positions(q_positions, k_positions)  # distances checked to fit in int64
    relative = (k.unsqueeze(-2) - q.unsqueeze(-1)).unsqueeze(-3)  # [1, i, j] or [b, 1, i, j]: j − i, exact
    bias = alibi_scores(relative, m.to(q.device)[:, None, None], symmetric=symmetric)  # [(b,) h, i, j]
    return bias.to(dtype)


def alibi_scores(relative: torch.Tensor, slopes: torch.Tensor, *, symmetric: bool = False) -> torch.Tensor:
    """ALiBi's bias, elementwise: m·(j − i) (causal) or −m·|j − i| (symmetric), in float64.

    The one definition of the formula: the materialised bias, the per-distance table and the flex
    score_mod all evaluate it. ``relative`` holds key − query positions (integers) and broadcasts
    against ``slopes`` (float64); tensor ops only, so it runs inside a score_mod.
    """
    relative = relative.to(torch.float64)
    return slopes * (-relative.abs() if symmetric else relative)


def alibi_distance_bias(
    distances: torch.Tensor, slopes: torch.Tensor, *, symmetric: bool = False
) -> torch.Tensor:
    """ALiBi's bias at query − key distances ``[n]`` for each head: ``[h, n]`` float64 (slopes ``[h]``)."""
    return alibi_scores(-distances[None, :], slopes.to(torch.float64)[:, None], symmetric=symmetric)


def alibi_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor | Sequence[float],
    *,
    causal: bool = True,
    symmetric: bool = False,
    scale: float | None = None,
    block: int = DEFAULT_BLOCK,
    window_tolerance: float | None = DEFAULT_WINDOW_TOLERANCE,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale − m_h·(i − j) + causal mask)·v without an s×s tensor; ``[b, h, s_q, d]``.

    ALiBi's bias per distance through :func:`posenc.kernels.per_distance.per_distance_attention` (a
    strided view of one table per head), and, causal, each head reading only the keys that can change
    its output by more than ``window_tolerance`` (:func:`posenc.kernels.per_distance.decay_windows`).

    Args:
        q: ``[b, h, s_q, d]`` queries at positions ``s_k − s_q … s_k − 1``.
        k, v: ``[b, h_kv, s_k, d]`` keys and values at positions ``0 … s_k − 1``; h_kv divides h.
        slopes: ``[h]`` the slope m of each head (any finite reals; the window needs m > 0).
        causal: mask keys after each query; False attends to every key (one SDPA call).
        symmetric: bias −m·|i − j| (bidirectional ALiBi) instead of −m·(i − j); with ``causal``
            both are the same.
        scale: score scale (default 1/√d, as SDPA).
        block: query rows per SDPA call on the causal path.
        window_tolerance: leave out, per head, keys so far that together they change no output
            value by more than this; None or 0 reads every key.

    Raises:
        ValueError: shapes that do not fit together, s_q > s_k with ``causal``, slopes that are
            not ``[h]`` or not finite, a non-positive ``block`` or a negative ``window_tolerance``.
    """
    m = _head_slopes(torch.as_tensor(slopes), None)  # [h] float64
    if q.dim() == 4 and m.numel() != q.shape[1]:  # other shapes: the kernel's checks name them
        raise ValueError(
            f"slopes must be [h={q.shape[1]}] real numbers, one per query head, got shape {tuple(m.shape)}"
        )
    if window_tolerance is not None and not window_tolerance >= 0:
        raise ValueError(f"window_tolerance must be ≥ 0 or None, got {window_tolerance}")
    windows = None
    if causal and window_tolerance:
        windows = decay_windows(q, k, v, m, scale=scale, tolerance=window_tolerance)
    m = m.to(q.device)
    return per_distance_attention(
        q,
        k,
        v,
        lambda distances: alibi_distance_bias(distances, m, symmetric=symmetric),
        causal=causal,
        scale=scale,
        block=block,
        windows=windows,
    )
