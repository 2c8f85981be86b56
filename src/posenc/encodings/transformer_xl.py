"""Transformer-XL's relative positional encoding: sinusoids of the distance, projected, read by the query.

Dai, Yang, Yang, Carbonell, Le & Salakhutdinov, 2019, "Transformer-XL: Attentive Language Models Beyond
a Fixed-Length Context", https://arxiv.org/abs/1901.02860, §3.3::

    A_ij = q_i·k_j  +  q_i·W_{k,R} R_{i−j}  +  u·k_j  +  v·W_{k,R} R_{i−j}
            (a)          (b)                   (c)        (d)

R_{i−j} is the sinusoidal code of the distance i − j (query position minus key position) at width
d_model, the table of "Attention Is All You Need" (posenc's exact ``sinusoidal_table``: sin at channel
2k, cos at 2k + 1; the reference code concatenates all sines then all cosines, a fixed permutation of
the channels that the learned W_{k,R} absorbs). W_{k,R} ∈ ℝ^{(h·d_head)×d_model} projects it to every
head (the reference's ``r_net``, one per layer), and u, v ∈ ℝ^{h×d_head} are learned per head (its
``r_w_bias`` and ``r_r_bias``). As in the reference code, the whole score is scaled by 1/√d_head:
attention computes (a)/√d_head, this module gives ((b) + (c) + (d))/√d_head (``score_terms``).

Causal and bidirectional: Transformer-XL is a decoder, so only i − j ≥ 0 survives its mask. The
sinusoid is defined at negative distances too (R_{−d} = (−sin, cos) of d·ω), which is what a
bidirectional model (XLNet's two-stream attention reuses the same term) reads: the term is computed for
every pair the positions give, and a causal mask removes the future ones.

Memory: (b) + (d) = (q_i + v)·W_{k,R} R_{i−j} is computed per distance, never per pair and channel:
W_{k,R} R for the D distinct distances (``[h, d_head, D]``), one matmul with the queries
(``[b, h, i, D]``), then each pair picks its distance. For consecutive positions (training, KV-cache
decoding) that pick is the Music Transformer's skew / Transformer-XL's rel-shift, a strided view with
no index; for any other positions a gather by an index of the distance. Nothing of shape
``[b, h, i, j, d]`` is built: the extra memory is O(s²), like the scores. D is the span of the
distances present (each batch row its own, so packed rows at distant offsets cost nothing): i + j − 1
for consecutive positions, more for positions with gaps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from posenc._validation import (
    check_even_positive_int,
    check_float_tensor,
    check_on_device,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding, query_key_positions
from posenc.encodings.description import Description
from posenc.functional.angles import reduced_angles_unchecked
from posenc.functional.sinusoidal import sinusoidal_frequency_pieces, sinusoidal_table
from posenc.kernels.query_blocked import BlockTerms

#: The reference code's initialisation: every weight N(0, 0.02) (``--init normal --init_std 0.02``).
INIT_STD = 0.02


def is_consecutive(positions: torch.Tensor) -> bool:
    """Whether ``[s]`` positions are start, start + 1, … (a host read; False for ``[b, s]``)."""
    if positions.dim() != 1:
        return False
    start = positions[:1]
    return torch.equal(positions, start + torch.arange(positions.shape[0], device=positions.device))


def skew(per_distance: torch.Tensor, k_len: int) -> torch.Tensor:
    """The rel-shift: ``out[b, h, n, m] = per_distance[b, h, n, (N − 1 − n) + m]`` as a strided view.

    For N queries and k_len keys at consecutive positions whose column c holds distance top − c
    (top the last query's position minus the first key's; D = N + k_len − 1 columns), the pair (n, m)
    has distance top − (N − 1 − n + m). The flattened rows read from offset N − 1 with a row stride
    of D − 1 (Huang et al., 2018's skewing, without its padding).

    Raises:
        ValueError: a table whose width is not N + k_len − 1 (the view would read other distances).
    """
    b, h, n, width = per_distance.shape
    if width != n + k_len - 1:
        raise ValueError(
            f"per_distance must be [b, h, n, n + k_len − 1] = [b, h, {n}, {n + k_len - 1}] for {n} queries "
            f"and k_len={k_len} keys, got {tuple(per_distance.shape)}"
        )
    if n == 1:
        return per_distance[..., :k_len]
    flat = per_distance.reshape(b, h, n * width)[..., n - 1 : n - 1 + n * (width - 1)]
    return flat.reshape(b, h, n, width - 1)[..., :k_len]


class TransformerXLRelative(PositionalEncoding):
    """Transformer-XL's relative encoding (Dai et al., 2019, https://arxiv.org/abs/1901.02860, §3.3).

    ``score_terms`` gives (q_i·W_{k,R}R_{i−j} + u·k_j + v·W_{k,R}R_{i−j}) / √d_head for every head.

    Args:
        d_model: width of the sinusoidal code R (the model's width, as the reference code); even.
        n_heads: attention heads; d_head = d_model / n_heads.
        base: the sinusoid's wavelength base (10000).
        init_std: standard deviation of W_{k,R}, u and v at initialisation (the reference's 0.02).

    Raises:
        ValueError: odd or non-positive d_model, n_heads that do not divide it, a non-positive base or
            init_std.
        TypeError: non-integer sizes.
    """

    kind = "bias"

    def __init__(
        self, d_model: int, n_heads: int, *, base: float = 10000.0, init_std: float = INIT_STD
    ) -> None:
        super().__init__()
        self.d_model = check_even_positive_int("d_model", d_model)
        self.n_heads = check_positive_int("n_heads", n_heads)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        self.d_head = self.d_model // self.n_heads
        self.base = check_positive_float("base", base)
        std = check_positive_float("init_std", init_std)
        self.r_proj = nn.Parameter(torch.randn(self.n_heads * self.d_head, self.d_model) * std)  # W_{k,R}
        self.u = nn.Parameter(torch.randn(self.n_heads, self.d_head) * std)  # the content bias u, per head
        self.v = nn.Parameter(torch.randn(self.n_heads, self.d_head) * std)  # the position bias v, per head
        # a plain attribute, not a buffer: module.to(dtype) cannot round it
        self._frequency_pieces = sinusoidal_frequency_pieces(self.d_model, self.base)  # [d/2, 4] float64

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        d = d_model or self.d_model
        return d * d + 2 * d

    # --- the pieces of the term ---------------------------------------------------------------------

    def relative_codes(self, distances: torch.Tensor) -> torch.Tensor:
        """R at query − key distances ``[...]``: float64 ``[..., d_model]``, sin at 2k, cos at 2k + 1."""
        if torch.compiler.is_compiling():  # tensor ops only (the table's checks read values)
            angle = reduced_angles_unchecked(distances, self._frequency_pieces)  # [..., d/2]
            return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)
        return sinusoidal_table(distances, self.d_model, base=self.base, dtype=torch.float64)

    def projected(self, distances: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """W_{k,R} R at distances ``[(b,) D]``, per head: ``[(b,) h, d_head, D]`` in ``dtype``."""
        codes = self.relative_codes(distances).to(self.r_proj.dtype)  # [(b,) D, d_model]
        heads = (codes @ self.r_proj.T).unflatten(-1, (self.n_heads, self.d_head))  # [(b,) D, h, d_head]
        return heads.movedim(-3, -1).to(dtype)  # [(b,) h, d_head, D]

    def distance_columns(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """The distances the per-distance table holds, and how each pair finds its column.

        Returns ``(top, D, index)``: column c holds distance top − c (top ``[]`` or ``[b]``), and the pair
        (i, j) reads column ``index[(b,) i, j]``, or, where ``index`` is None (consecutive positions),
        column N − 1 − i + j (:func:`skew`). Eagerly D covers exactly the distances present (each
        batch row its own top); compiled (no host reads) D = N + M − 1 around the last query's distance
        to the first key, which holds every pair of consecutive positions: others stop the call with a
        RuntimeError on the device.
        """
        n, m = q_positions.shape[-1], k_positions.shape[-1]
        compiling = torch.compiler.is_compiling()
        if not compiling and is_consecutive(q_positions) and is_consecutive(k_positions):
            return q_positions[-1] - k_positions[0], n + m - 1, None
        distance = q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)  # [(b,) i, j]
        if compiling:
            top, width = q_positions[..., -1] - k_positions[..., 0], n + m - 1
            index = top[..., None, None] - distance
            check_on_device(
                (index >= 0) & (index < width),
                "compiled, Transformer-XL's term takes consecutive positions (eagerly, any)",
            )
            return top, width, index
        top, bottom = distance.amax(dim=(-2, -1)), distance.amin(dim=(-2, -1))  # [] or [b]
        width = int((top - bottom).max()) + 1
        return top, width, top[..., None, None] - distance

    # --- the hooks attention calls ------------------------------------------------------------------

    def score_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable | None = None,
    ) -> torch.Tensor:
        """(q_i·W_{k,R}R_{i−j} + u·k_j + v·W_{k,R}R_{i−j}) / √d_head, ``[b, h, i, j]``.

        q ``[b, h, i, d_head]``, k ``[b, h_kv, j, d_head]``; positions ``[i]`` / ``[b, i]`` and ``[j]`` /
        ``[b, j]`` (:func:`~posenc.encodings.base.query_key_positions`).
        """
        q, k = self._checked_heads(q, k)
        q_positions, k_positions = pair_positions(*query_key_positions(q, k, q_positions, k_positions))
        top, width, index = self.distance_columns(q_positions, k_positions)
        distances = top.unsqueeze(-1) - torch.arange(width, device=top.device)  # [(b,) D]
        query = q + self.v.to(q.dtype).unsqueeze(-2)  # q_i + v: [b, h, i, d]
        per_distance = query @ self.projected(distances, q.dtype)  # (b) + (d) per distance: [b, h, i, D]
        if index is None:
            position = skew(per_distance, k.shape[2])  # [b, h, i, j]
        else:
            index = index.unsqueeze(-3) if index.dim() == 3 else index
            position = per_distance.gather(-1, index.expand(*per_distance.shape[:3], k.shape[2]))
        return (position + self.key_bias_term(k, q.shape[1])) / math.sqrt(self.d_head)

    def block_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable | None = None,
        content: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> BlockTerms:
        """:meth:`score_terms` for one block of queries at a time (``posenc.kernels.query_blocked``): W_{k,R}R
        is projected once for every distance present, each block multiplies its queries by the columns
        of its own distances and reads its pairs by the rel-shift (or the index). Assumes attention's
        scale 1/√d_head (the encoding's logit_scale)."""
        q, k = self._checked_heads(q, k)
        q_positions, k_positions = pair_positions(*query_key_positions(q, k, q_positions, k_positions))
        top, width, index = self.distance_columns(q_positions, k_positions)
        distances = top.unsqueeze(-1) - torch.arange(width, device=top.device)  # [(b,) D]
        n_queries, scale, n_heads = q.shape[2], 1 / math.sqrt(self.d_head), q.shape[1]
        u, v = self.u.to(q.dtype), self.v.to(q.dtype)  # [h, d]
        # consecutive positions: u·k_j joins the content product as (q + u)·k (the kernel's query_shift),
        # and the term is (q + u + (v − u))·W R read by the rel-shift alone, a view of one product
        shift = v if index is not None else v - u

        def block(q_rows, k_keys, rows, keys, projected, shift, u):
            query = q_rows + shift.unsqueeze(-2)  # q_i + v: [b, h, n, d]
            if index is None:  # the block's pairs read columns N − rows.stop … N − 1 − rows.start + m − 1
                first = n_queries - rows.stop
                width = rows.stop - rows.start + keys.stop - keys.start - 1
                per_distance = query @ projected[..., first : first + width]  # [b, h, n, n + m − 1]
                return skew(per_distance, keys.stop - keys.start)  # [b, h, n, m]
            at = index[..., rows, keys]  # [(b,) n, m]
            at = at.unsqueeze(-3) if at.dim() == 3 else at
            per_distance = query @ projected  # [b, h, n, D]
            position = per_distance.gather(-1, at.expand(*per_distance.shape[:3], at.shape[-1]))
            return position + self.key_bias_term(k_keys, n_heads, u)

        tensors = (self.projected(distances, q.dtype) * scale, shift, u * scale)
        return BlockTerms(block, tensors, query_shift=u if index is None else None)

    def key_bias_term(self, k: torch.Tensor, n_heads: int, u: torch.Tensor | None = None) -> torch.Tensor:
        """u·k_j for every query head: ``[b, h, 1, j]`` from keys ``[b, h_kv, j, d]`` (grouped heads
        read their key head, as attention does); ``u`` ``[h, d]``: the encoding's own by default."""
        b, h_kv, j, d = k.shape
        u = (self.u if u is None else u).to(k.dtype).view(h_kv, n_heads // h_kv, d)  # [h_kv, groups, d]
        return torch.einsum("bgjd,gnd->bgnj", k, u).reshape(b, n_heads, 1, j)

    def _checked_heads(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = check_float_tensor("q", q), check_float_tensor("k", k)
        if q.dim() != 4 or k.dim() != 4 or q.shape[-1] != self.d_head or k.shape[-1] != self.d_head:
            raise ValueError(
                f"q and k must be [b, h, s, d_head={self.d_head}], got {tuple(q.shape)} and {tuple(k.shape)}"
            )
        if q.shape[1] != self.n_heads or self.n_heads % k.shape[1]:
            raise ValueError(
                f"q must have n_heads={self.n_heads} heads and k a divisor of them, got {q.shape[1]} and "
                f"{k.shape[1]}"
            )
        return q, k

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, base={self.base}"


#: What posenc says about :class:`TransformerXLRelative` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Transformer-XL",
    where_it_acts="reads q and k: (q + v)·W R_{i−j} + u·k_j over a sinusoidal relative matrix",
    used_by="Transformer-XL",
    parameter_formula="d² + 2·d (W_{k,R}: d×d; u and v: h·d/h each; independent of L)",
    figures={
        "logit-shift": "Flat at zero: the position terms read R_{i−j}, the code of the distance alone, and u·k_j "
        "none, so shifting every position leaves the logits unchanged."
    },
)
