"""RoPE on several coordinate axes: which frequency turns with which axis (axial RoPE, M-RoPE's
sections), and RoPE-Mixed's learned directions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from posenc._validation import (
    check_choice,
    check_even_positive_int,
    check_positive_float,
    check_positive_int,
    check_positive_ints,
)
from posenc.functional.rope.scalings import _default

#: How a spectrum is split among axes (:func:`rope_section_axes`): Qwen2-VL's runs, Qwen3-VL's interleaving,
#: and time on the lowest frequencies after the spatial axes alternating (VideoRoPE, Ernie 4.5-VL).
SECTION_LAYOUTS = ("contiguous", "interleaved", "time_last")


def rope_axial_frequencies(
    axes: Sequence[int], *, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Axial RoPE: each coordinate axis rotates its own channels with its own frequencies, concatenated.

    Axis a takes d_a channels (d_a/2 pairs) with θ_{a,i} = base^(−2i/d_a), i = 0 … d_a/2 − 1: the
    construction of Flux / diffusers' ``FluxPosEmbed`` (``axes_dim``), RoPE-ViT's axial variant
    (Heo et al., 2024, https://arxiv.org/abs/2403.13298), timm's ``RotaryEmbeddingCat`` and
    rotary-embedding-torch's ``get_axial_freqs``. The pairs follow the axes in order, so both layouts
    apply unchanged: ``"interleaved"`` pairs (2k, 2k+1) as Flux, ``"half"`` pairs (k, k + r/2).

    Args:
        axes: the rotary width d_a of each axis (even), r = Σ d_a.
        base: ``theta`` of every axis.

    Returns:
        ``(inv_freq [r/2] float64, axis [r/2] int64)``: the frequency of each pair and the axis it turns with.

    Raises:
        ValueError: an odd or non-positive width (named by its index), a non-positive base.
        TypeError: widths that are not a sequence of ints.
    """
    widths = check_positive_ints("axes", axes, even=True)
    base = check_positive_float("base", base)
    inv_freq = torch.cat([_default(width, base)[0] for width in widths])  # [r/2]
    axis = torch.cat([torch.full((width // 2,), a, dtype=torch.int64) for a, width in enumerate(widths)])
    return inv_freq, axis


def rope_section_axes(sections: Sequence[int], *, layout: str = "contiguous") -> torch.Tensor:
    """The axis each frequency of one RoPE spectrum turns with when it is split among axes (M-RoPE).

    ``sections`` (s_1 … s_n) counts the pairs of each axis, Σ s_a = r/2, as Qwen2-VL's
    ``mrope_section`` (Wang et al., 2024, https://arxiv.org/abs/2409.12191) with axes (t, h, w):

    - ``"contiguous"`` (Qwen2-VL, Qwen2.5-VL): pairs 0 … s_1 − 1 turn with axis 0, the next s_2 with
      axis 1, and so on; the frequencies are the 1-D spectrum θ_k = base^(−2k/r) unchanged.
    - ``"interleaved"`` (Qwen3-VL): pair k turns with axis a = k mod n when a ≥ 1 and k < n·s_a, with
      axis 0 otherwise, so that every axis sees high and low frequencies.
    - ``"time_last"`` (VideoRoPE's low-frequency temporal allocation, Wei et al., 2025,
      https://arxiv.org/abs/2502.05173; Ernie 4.5-VL's ``[h w h w … t t t]``): the spatial axes 1 … n−1
      take turns pair by pair over the highest frequencies (pair k < Σ_{a≥1} s_a turns with axis
      1 + k mod (n − 1)), axis 0, time, the last s_0 pairs: the lowest frequencies. Every spatial axis
      needs the same count.

    Returns:
        int64 ``[r/2]``.

    Raises:
        ValueError: non-positive section sizes (named), an unknown layout; with ``"interleaved"``,
            sections that the interleaving cannot give (n·s_a > r/2 for an axis a ≥ 1); with
            ``"time_last"``, fewer than two axes or spatial axes of different counts.
        TypeError: sections that are not a sequence of ints.
    """
    sections = check_positive_ints("sections", sections)
    layout = check_choice("layout", layout, SECTION_LAYOUTS)
    pairs, n = sum(sections), len(sections)
    if layout == "contiguous":
        return torch.cat([torch.full((size,), a, dtype=torch.int64) for a, size in enumerate(sections)])
    k = torch.arange(pairs)
    if layout == "time_last":
        if n < 2 or len(set(sections[1:])) > 1:
            raise ValueError(
                f"time_last sections alternate the spatial axes pair by pair: give (time, s, s, …) with "
                f"one count s for every spatial axis, got {sections}"
            )
        spatial = pairs - sections[0]
        return torch.where(k < spatial, 1 + k % (n - 1), 0).to(torch.int64)
    axis = torch.zeros(pairs, dtype=torch.int64)
    for a in range(1, n):
        if n * sections[a] > pairs:
            raise ValueError(
                f"interleaved sections {sections} cannot give axis {a} {sections[a]} pairs: the interleaving "
                f"takes every {n}th pair below {n}·{sections[a]} = {n * sections[a]}, past the {pairs} pairs"
            )
        axis[(k % n == a) & (k < n * sections[a])] = a
    return axis


def rope_mixed_frequencies(
    n_heads: int, rotary_dim: int, axes: int, *, base: float = 10.0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies (Heo et al., 2024, https://arxiv.org/abs/2403.13298): ``[h, r/2, n]``.

    Pair k of head h turns by Σ_a pos_a·F[h, k, a], a learned direction in coordinate space. The pairs
    fall in n groups of r/(2n); group c of head h points along column c of a random rotation R_h, with
    magnitudes base^(−2i·n/r), i = 0 … r/(2n) − 1. For two axes, R_h turns by a uniform angle φ_h, so
    the groups point along φ_h and φ_h + π/2: the paper's initialisation (its ``theta`` is ``base``, 10),
    with the paper's x and y as coordinates 0 and 1.

    Raises:
        ValueError: r not divisible by 2n, non-positive sizes or base.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    axes = check_positive_int("axes", axes)
    base = check_positive_float("base", base)
    if rotary_dim % (2 * axes):
        raise ValueError(
            f"RoPE-Mixed splits rotary_dim={rotary_dim} into 2·axes = {2 * axes} groups of pairs"
        )
    group = rotary_dim // (2 * axes)
    magnitude = base ** (-torch.arange(group, dtype=torch.float64) * 2 * axes / rotary_dim)  # [r/(2n)]
    if axes == 2:
        phi = torch.rand(n_heads, generator=generator, dtype=torch.float64) * 2 * math.pi  # [h]
        directions = torch.stack(
            (torch.stack((phi.cos(), phi.sin()), -1), torch.stack((-phi.sin(), phi.cos()), -1)), 1
        )  # [h, group c, axis a]: φ, φ + π/2
    else:
        directions = _uniform_rotations(n_heads, axes, generator).transpose(-1, -2)  # [h, c, a]
    return (directions[:, :, None, :] * magnitude[None, None, :, None]).reshape(
        n_heads, rotary_dim // 2, axes
    )


def _uniform_rotations(count: int, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """``count`` rotations of R^n drawn uniformly (Haar measure on SO(n)), float64 ``[count, n, n]``.

    Q of the QR decomposition of a Gaussian matrix, its columns' signs fixed by R's diagonal (Mezzadri,
    2007: without that, Q is biased by the factorisation's sign convention), then the first column negated
    where the determinant is −1.
    """
    gaussian = torch.randn(count, n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar on O(n)
    flip = torch.ones(count, n, dtype=torch.float64)
    flip[:, 0] = torch.sign(torch.linalg.det(q))
    return q * flip.unsqueeze(-2)  # det +1


def rope_mixed_cos_sin(
    positions: torch.Tensor, frequencies: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE-Mixed's angles Σ_a pos_a·F[h, k, a] in float64, differentiable in F.

    Args:
        positions: ``[s, n]`` or ``[b, s, n]`` coordinates (integer or float; used as float64).
        frequencies: ``[h, r/2, n]`` (any float dtype; a learned parameter).

    Returns:
        ``(cos, sin)`` float64, ``[1, h, s, r/2]`` or ``[b, h, s, r/2]``: one table per head.

    The exact reduction of integer angles cannot carry a gradient to F, so the angle is the float64
    product itself: an absolute error of about |angle|·2^-53 (1e-10 rad at 10^6 positions), against
    0.06 rad for a float32 recipe at 2^20.
    """
    coordinates = positions.to(torch.float64)
    if coordinates.dim() == 2:
        coordinates = coordinates[None]  # [1, s, n]
    angle = torch.einsum("bsn,hkn->bhsk", coordinates, frequencies.to(torch.float64))  # [b, h, s, r/2]
    return torch.cos(angle), torch.sin(angle)


def check_frequency_axes(axis: object, pairs: int) -> torch.Tensor:
    """``axis`` as int64 ``[pairs]`` of axis indices 0 … n − 1, every axis used (a ValueError naming it)."""
    if not isinstance(axis, torch.Tensor) or axis.dim() != 1 or axis.dtype.is_floating_point:
        raise ValueError(f"axis must be a 1-d integer tensor [r/2], got {getattr(axis, 'shape', axis)!r}")
    if axis.shape[0] != pairs:
        raise ValueError(f"axis must name the axis of each of the {pairs} frequencies, got {axis.shape[0]}")
    axis = axis.to(torch.int64)
    if int(axis.min()) < 0 or set(axis.tolist()) != set(range(int(axis.max()) + 1)):
        raise ValueError(
            f"axis must use every axis 0 … n − 1 and no other, got axes {sorted(set(axis.tolist()))}"
        )
    return axis


__all__ = [
    "SECTION_LAYOUTS",
    "check_frequency_axes",
    "rope_axial_frequencies",
    "rope_mixed_cos_sin",
    "rope_mixed_frequencies",
    "rope_section_axes",
]
