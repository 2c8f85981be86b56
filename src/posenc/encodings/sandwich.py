"""Sandwich: a parameter-free bias from the dot product of two sinusoidal position embeddings.

Chi, Fan, Rudnicky and Ramadge, 2023, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis", https://arxiv.org/abs/2212.10356 (ACL 2023). The sinusoidal embeddings p of
width d′ are kept out of the token stream; their dot product, which depends on i − j alone, is added to
the logits instead:

    p_i·p_j = Σ_{k=1}^{d′/2} cos((i − j)·ω_k),     ω_k = 10000^(−2k/d′)
    b_h(i, j) = (p_i·p_j − d′/2) / (8h/H),         h = 1 … H

The shift by d′/2 makes the bias 0 at distance 0 and ≤ 0 elsewhere; the division gives the heads
ALiBi's spread (head 1 the steepest, head H one eighth of the unscaled bias). Notation used for tensor
shapes: b batch, h heads, i / j query / key positions, n distances.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal, localcontext

import torch

from posenc._validation import (
    check_even_positive_int,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.description import Description
from posenc.functional.angles import MAX_POSITION, reduced_angles, reduced_angles_unchecked, split_exact
from posenc.functional.sinusoidal import sinusoidal_frequency_pieces

#: The spread of the heads' scales, as ALiBi's slopes 2^(−8h/H): head h divides by 8h/H.
HEAD_SPREAD = 8.0

#: Frequencies the compiled bias sums in one step: the compiler unrolls the loop, so d′ = 128 traces 8
#: steps instead of 64, for 8 times the memory of one frequency.
_FREQUENCIES_AT_ONCE = 8


@functools.lru_cache(maxsize=16)
def sandwich_frequency_pieces(d_position: int, base: float) -> torch.Tensor:
    """ω_k = base^(−2k/d′) for k = 1 … d′/2 (the paper's sum starts at k = 1), as exact float64 pieces
    ``[d′/2, 4]`` (CPU): posenc's sinusoidal frequencies of width d′ without k = 0, then 1/base."""
    with localcontext() as context:
        context.prec = 60
        last = split_exact(Decimal(1) / Decimal(base))
    pieces = sinusoidal_frequency_pieces(d_position, base)[1:]  # k = 1 … d′/2 − 1
    return torch.cat((pieces, torch.tensor([last], dtype=torch.float64)))


def sandwich_head_scales(n_heads: int) -> torch.Tensor:
    """1 / (8h/H) = H/(8h) for heads h = 1 … H, float64 ``[H]`` (head 0 first)."""
    heads = torch.arange(1, n_heads + 1, dtype=torch.float64)
    return n_heads / (HEAD_SPREAD * heads)


class Sandwich(PositionalEncoding):
    """Sandwich (Chi et al., 2023, https://arxiv.org/abs/2212.10356): (p_i·p_j − d′/2)·H/(8h), no parameters.

    p_i·p_j − d′/2 = Σ_k (cos((i − j)·ω_k) − 1) = −2·Σ_k sin²((i − j)·ω_k/2) is computed in that form, from
    posenc's exact angles (integer distances reduced modulo 2π in float64 pieces,
    :mod:`posenc.functional.angles`), so each value is the one rounding of the float64 bias at any
    distance below 2^27. It depends on |i − j| alone: causal and bidirectional attention use it as it is.

    Hooks: ``distance_bias`` gives the bias per distance (attention's per-distance CPU path); ``bias``
    materialises ``[h, i, j]`` from the distinct distances of the positions it is given (never
    ``[i, j, d′/2]``); ``score_mod`` looks each score's distance up in a per-distance table.

    Args:
        n_heads: attention heads H.
        d_position: d′, the width of the sinusoidal embeddings whose dot product is the bias (even; 128
            by default). A larger d′ adds slower frequencies: the bias keeps falling over longer distances.
        base: the wavelength base, 10000 as in the sinusoidal encoding.

    Raises:
        ValueError: a non-positive ``n_heads``, an odd or non-positive ``d_position``, a non-positive base.
        TypeError: non-integer sizes.
    """

    kind = "bias"

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's heads; d′ keeps its default, 128, whatever the model's width (NeMo's implementation
        takes d′ = d_head instead)."""
        return {"n_heads": n_heads}

    def __init__(self, n_heads: int, *, d_position: int = 128, base: float = 10000.0) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)
        self.d_position = check_even_positive_int("d_position", d_position)
        self.base = check_positive_float("base", base)
        # built here, outside any compiled graph (Decimal arithmetic); kept float64 by _apply
        self.register_buffer("pieces", self._exact_pieces(torch.device("cpu")), persistent=False)  # [d′/2, 4]
        self.bias_dtype = torch.float32  # the dtype its bias is rounded to: follows .double(), .half(), …

    def _exact_pieces(self, device: torch.device) -> torch.Tensor:
        pieces = sandwich_frequency_pieces(self.d_position, self.base)
        return pieces.to(device).clone()  # a copy: never the cached tensor

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # no parameter says what dtype the model computes in: a conversion applied to a probe does
        self.bias_dtype = torch.promote_types(fn(torch.zeros(0, dtype=self.bias_dtype)).dtype, torch.float32)
        self.pieces = self._exact_pieces(self.pieces.device)  # never rounded by a dtype conversion
        return self

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return 0

    def _scaled(self, shifted_dot: torch.Tensor) -> torch.Tensor:
        """p·p − d′/2 ``[...]`` times each head's scale: ``[h, ...]``."""
        scales = sandwich_head_scales(self.n_heads).to(shifted_dot.device)
        return scales.view(-1, *([1] * shifted_dot.dim())) * shifted_dot

    def shifted_dot(self, distances: torch.Tensor) -> torch.Tensor:
        """p_i·p_j − d′/2 at distances i − j ``[...]`` (integers, |i − j| < 2^27), float64 ``[...]``.

        Memory: ``[..., d′/2]`` float64 for the angles: call it with distinct distances.

        Raises:
            ValueError: a distance of 2^27 or more, where angles are no longer exact.
        """
        magnitude = distances.abs()
        pieces = self.pieces  # [d′/2, 4]
        if torch.compiler.is_compiling():
            half = reduced_angles_unchecked(magnitude, pieces) / 2  # [..., d′/2]
        else:
            if magnitude.numel() and int(magnitude.max()) >= MAX_POSITION:
                raise ValueError(
                    f"Sandwich's exact angles need |i − j| < 2^27 = {MAX_POSITION}, got {int(magnitude.max())}"
                )
            half = reduced_angles(magnitude, pieces) / 2
        return -2 * half.sin().square().sum(dim=-1) + 0.0  # Σ_k (cos θ_k − 1) without cancellation; 0, not −0

    def distance_bias(self, distances: torch.Tensor) -> torch.Tensor:
        """The bias at query − key distances ``[n]`` for each head, ``[h, n]`` (float64)."""
        return self._scaled(self.shifted_dot(distances))

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The bias ``[h, i, j]`` (``[b, h, i, j]`` for batched positions), float32 (float64 in a float64
        module), each value the one rounding of the float64 bias.

        Computed once per distinct |i − j| (at most i + j − 1 of them for consecutive positions) and
        gathered; under torch.compile, where the distinct count is data-dependent, eight frequencies at a
        time over the pairs (memory ``[(b,) i, j, 8]``, never ``[(b,) i, j, d′/2]``).
        """
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).abs()  # [(b,) i, j]
        if torch.compiler.is_compiling():
            values = self._scaled(self._pairwise_shifted_dot(distance))  # [h, (b,) i, j]
        else:
            distinct, index = distance.unique(return_inverse=True)
            values = self.distance_bias(distinct)[:, index]  # [h, (b,) i, j]
        values = values if distance.dim() == 2 else values.movedim(0, 1)  # [(b,) h, i, j]
        return values.to(self.bias_dtype)

    def _pairwise_shifted_dot(self, distance: torch.Tensor) -> torch.Tensor:
        """p·p − d′/2 for every pair, ``_FREQUENCIES_AT_ONCE`` frequencies at a time (the compiled path:
        a loop the compiler unrolls, so fewer steps trace faster; memory ``[(b,) i, j, 8]``)."""
        pieces = self.pieces
        total = torch.zeros(distance.shape, dtype=torch.float64, device=distance.device)
        for k in range(0, pieces.shape[0], _FREQUENCIES_AT_ONCE):
            half = reduced_angles_unchecked(distance, pieces[k : k + _FREQUENCIES_AT_ONCE]) / 2  # [..., ≤ 8]
            total = total + half.sin().square().sum(dim=-1)
        return -2 * total + 0.0

    def score_mod(
        self,
        q_offset: int = 0,
        kv_offset: int = 0,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> Callable:
        """``score_mod(score, b, h, q_idx, kv_idx)`` adding the bias by a lookup into a per-distance
        table ``[h, D + 1]`` (D the largest |i − j| of these positions), in the bias's dtype.

        Where D + 1 exceeds the number of (query, key) pairs (a few far-apart positions) the lookup goes
        into the materialised bias instead, so the table never outgrows the scores.

        Raises:
            ValueError: positions not given (the table is built for their distances), positions a bias
                cannot use (see :func:`posenc._validation.pair_positions`).
        """
        if q_positions is None or k_positions is None:
            raise ValueError(
                "Sandwich's score_mod reads a table of the bias per distance and needs q_positions and "
                "k_positions (the table covers their distances)"
            )
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        if torch.compiler.is_compiling():  # the table's length is a host value: the bias per pair instead
            return PositionalEncoding.score_mod(self, q_positions=q_positions, k_positions=k_positions)
        span = max(
            abs(int(q_positions.max()) - int(k_positions.min())),
            abs(int(k_positions.max()) - int(q_positions.min())),
        )
        batch = max(
            q_positions.shape[0] if q_positions.dim() == 2 else 1,
            k_positions.shape[0] if k_positions.dim() == 2 else 1,
        )
        pairs = batch * q_positions.shape[-1] * k_positions.shape[-1]
        if span + 1 > pairs:
            return PositionalEncoding.score_mod(self, q_positions=q_positions, k_positions=k_positions)
        distances = torch.arange(span + 1, device=q_positions.device)
        table = self.distance_bias(distances).to(self.bias_dtype)  # [h, D+1]
        q_position, k_position = _lookup(q_positions), _lookup(k_positions)

        def score_mod(score, b, h, q_idx, kv_idx):
            distance = (q_position(b, q_idx) - k_position(b, kv_idx)).abs()
            return score + table[h, distance].to(score.dtype)

        return score_mod

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, d_position={self.d_position}, base={self.base:g}"


#: What posenc says about :class:`Sandwich` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Sandwich",
    where_it_acts="adds the dot product of two sinusoidal codes, per-head scaled",
    used_by="Sandwich",
    parameter_formula="0",
    figures={
        "bias-heads": "(p_i·p_j − d′/2)·H/(8h): 0 on the diagonal and negative off it, symmetric, one colour "
        "scale; head 0 (the first) falls off most, the last head an eighth as much.",
        "bias-distance": "Each head's bias is the same curve scaled: it falls steeply over the first distances "
        "and then ever more slowly with small ripples (a sum of cosines), no parameters.",
    },
)


def _lookup(positions: torch.Tensor) -> Callable:
    """(batch index, sequence index) -> position, for positions ``[s]`` or ``[b, s]`` inside a score_mod."""
    if positions.dim() == 1:
        return lambda b, index: positions[index]
    return lambda b, index: positions[b, index]


__all__ = ["HEAD_SPREAD", "Sandwich", "sandwich_frequency_pieces", "sandwich_head_scales"]
