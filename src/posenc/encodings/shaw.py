"""Shaw et al.'s relative position representations, and the two variants BERT took from them.

Shaw, Uszkoreit & Vaswani, 2018, "Self-Attention with Relative Position Representations",
https://arxiv.org/abs/1803.02155, eq. (3)–(5)::

    e_ij = q_i·(k_j + a^K_ij) / √d            z_i = Σ_j α_ij·(v_j + a^V_ij)
    a^K_ij = w^K_clip(j − i, k)               a^V_ij = w^V_clip(j − i, k)
    clip(x, k) = max(−k, min(k, x))

with learned tables w^K, w^V ∈ ℝ^{(2k+1)×d_head} shared by the heads of a layer. The clipping is the
paper's own (every key farther than k positions shares the table's end row), not a silent clamp.

BERT's ``position_embedding_type="relative_key"`` and ``"relative_key_query"`` (transformers 4.x
``BertSelfAttention``; the second is Huang et al., 2020, "Improve Transformer Models with Better
Relative Position Embeddings", https://arxiv.org/abs/2009.13658, method 4) keep one table e of
2L − 1 rows (L = ``max_position_embeddings``), indexed by the query − key distance, unclipped::

    score_ij = (q_i·k_j + q_i·e_{i−j}  [+ k_j·e_{i−j}]) / √d

Here attention computes q·kᵀ/√d and this module gives the rest (``score_terms``), divided by √d too.

Memory: the term is read per table row, never per pair and channel: ``q @ wᵀ`` is ``[b, h, i, rows]``
and a gather by each pair's row gives ``[b, h, i, j]``; the relative values sum the attention weights
per row (``scatter_add``, ``[b, h, i, rows]``) and multiply by w^V (``[rows, d]``). Nothing of shape
``[b, h, i, j, d]`` (or ``[i, j, d]``) is built: the extra memory is O(s²) like the scores, not O(s²·d).

Backends: the key term is a ``score_terms`` term, so SDPA receives it in its float mask and flex adds it
in its score_mod; with relative values (``values=True``) the output needs the attention weights
themselves (``reads_attention_weights``), so attention runs its eager path on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from posenc._validation import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_on_device,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding, query_key_positions
from posenc.encodings.description import Description
from posenc.kernels.banded import clipped_relative_attention
from posenc.kernels.query_blocked import BlockTerms

#: Shaw et al.'s clipped table, and BERT's two unclipped ones (transformers 4.x names).
VARIANTS = ("shaw", "relative_key", "relative_key_query")
#: Shaw et al.'s clipping distance k in their experiments (§4: k = 16 for the base and big models).
DEFAULT_MAX_DISTANCE = 16
#: BERT's ``initializer_range``: the standard deviation of its embedding tables.
BERT_INIT_STD = 0.02
#: Keys summed per table row at a time in the relative values (:func:`sum_by_row`).
KEY_CHUNK = 256


def gather_rows(per_row: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``per_row[b, h, n, rows[(b,) n, m]]``: one value per pair from a value per table row.

    Args:
        per_row: ``[b, h, n, R]``, e.g. q·w_r for every query n and table row r.
        rows: int64 ``[n, m]`` or ``[b, n, m]``, the row of every (n, m) pair, each in 0 … R − 1.

    Returns:
        ``[b, h, n, m]``; the index is a broadcast view, never copied per head.
    """
    b, h, n = per_row.shape[:3]
    index = rows.unsqueeze(-3) if rows.dim() == 3 else rows  # [(b,) 1, n, m] or [n, m]
    return per_row.gather(-1, index.expand(b, h, n, rows.shape[-1]))


def sum_by_row(weights: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Σ_m weights[b, h, n, m] over the pairs of each table row: ``[b, h, n, n_rows]`` (scatter_add).

    A clipped end row gathers almost every key of a long sequence; added one by one in float32 its sum
    would drift by ~√m roundings. Keys are taken :data:`KEY_CHUNK` at a time, each chunk summed in the
    weights' dtype and the chunks in float64 (a ``[b, h, n, n_rows]`` accumulator, no copy of the weights).
    """
    b, h, n, m = weights.shape
    index = rows.unsqueeze(-3) if rows.dim() == 3 else rows  # [(b,) 1, n, m] or [n, m]
    total = None
    for start in range(0, m, KEY_CHUNK):
        part = weights[..., start : start + KEY_CHUNK]  # [b, h, n, chunk]
        chunk = torch.zeros(b, h, n, n_rows, dtype=weights.dtype, device=weights.device).scatter_add(
            -1, index[..., start : start + KEY_CHUNK].expand(part.shape), part
        )
        total = chunk.double() if total is None else total + chunk.double()
    return total.to(weights.dtype)


def _same_consecutive(q, k, q_positions, k_positions) -> bool:
    """Whether queries and keys are the same tokens at consecutive positions ``[s]`` (a host read)."""
    if q.shape[2] != k.shape[2] or q_positions.dim() != 1 or not torch.equal(q_positions, k_positions):
        return False
    steps = torch.arange(q_positions.shape[0], device=q_positions.device)
    return torch.equal(q_positions - q_positions[:1], steps)


class ShawRelativePosition(PositionalEncoding):
    """Relative position representations (Shaw et al., 2018, https://arxiv.org/abs/1803.02155).

    Adds q_i·w^K_clip(j − i, k)/√d to the scores (``score_terms``) and, with ``values=True``,
    Σ_j α_ij·w^V_clip(j − i, k) to the output (``value_terms``). With ``variant="relative_key"`` or
    ``"relative_key_query"``, BERT's unclipped variants (transformers 4.x ``BertSelfAttention``):
    (q_i·e_{i−j} [+ k_j·e_{i−j}])/√d with a table of 2·max_len − 1 rows.

    Args:
        d_head: width of each head (the tables' width).
        max_distance: Shaw's clipping distance k ≥ 1 (default 16, the paper's): the table has 2k + 1
            rows, keys farther than k share its end rows. Only for ``variant="shaw"``.
        values: add Shaw's relative values a^V (a second table); attention then computes its weights
            explicitly, the eager path, on every backend. Only for ``variant="shaw"``.
        variant: ``"shaw"``, ``"relative_key"`` or ``"relative_key_query"``.
        max_len: for BERT's variants, ``max_position_embeddings`` L: the table spans query − key
            distances −(L − 1) … L − 1 and a farther pair raises (BERT's embedding lookup would fail).
            The Shaw variant does not read it (its table is clipped) and keeps it as the model's length.
        init_std: standard deviation of the tables' normal initialisation; None gives each variant its
            reference's: Xavier-uniform for Shaw (tensor2tensor's variables), N(0, 0.02) for BERT.

    Raises:
        ValueError: ``max_distance`` < 1, an unknown variant, BERT's variants without ``max_len`` or
            with ``max_distance`` or ``values``, non-positive sizes.
        TypeError: non-integer sizes, a non-bool ``values``.
    """

    kind = "bias"

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's head width and length (BERT's variants read the length; Shaw's ignores it)."""
        return {"d_head": d_model // n_heads, "max_len": max_len}

    def __init__(
        self,
        d_head: int,
        *,
        max_distance: int | None = None,
        values: bool = False,
        variant: str = "shaw",
        max_len: int | None = None,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        self.d_head = check_positive_int("d_head", d_head)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.values = check_bool("values", values)
        # the output needs the attention weights (the eager path) with relative values only
        self.capabilities = replace(type(self).capabilities, reads_attention_weights=self.values)
        self.max_len = None if max_len is None else check_positive_int("max_len", max_len)
        if self.variant == "shaw":
            k = (
                DEFAULT_MAX_DISTANCE
                if max_distance is None
                else check_positive_int("max_distance", max_distance)
            )
            self.max_distance = k
            n_rows = 2 * k + 1
        else:
            if max_distance is not None:
                raise ValueError(
                    f"max_distance is Shaw's clipping distance; variant {self.variant!r} does not clip "
                    f"(its table spans distances up to max_len − 1), got max_distance={max_distance!r}"
                )
            if self.values:
                raise ValueError(
                    f"values=True adds Shaw's relative values; variant {self.variant!r} (BERT) has none"
                )
            if self.max_len is None:
                raise ValueError(
                    f"variant {self.variant!r} needs max_len (BERT's max_position_embeddings): its table "
                    "has 2·max_len − 1 rows"
                )
            self.max_distance = None
            n_rows = 2 * self.max_len - 1
        self.init_std = None if init_std is None else check_positive_float("init_std", init_std)
        self.key_table = nn.Parameter(self._initial(n_rows))  # w^K (BERT: e), [rows, d_head]
        self.value_table = nn.Parameter(self._initial(n_rows)) if self.values else None  # w^V

    def _initial(self, n_rows: int) -> torch.Tensor:
        table = torch.empty(n_rows, self.d_head)
        if self.init_std is not None:
            return nn.init.normal_(table, std=self.init_std)
        if self.variant == "shaw":
            return nn.init.xavier_uniform_(table)
        return nn.init.normal_(table, std=BERT_INIT_STD)

    @property
    def n_rows(self) -> int:
        """Rows of each table: 2k + 1 (Shaw) or 2L − 1 (BERT)."""
        return self.key_table.shape[0]

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        d_head = d_model // n_heads if d_model and n_heads else self.d_head
        if self.variant == "shaw":
            rows = 2 * self.max_distance + 1
        else:
            rows = 2 * (max_len or self.max_len) - 1
        return rows * d_head * (2 if self.values else 1)

    # --- which table row each pair reads ------------------------------------------------------------

    def rows(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The table row of every (query, key) pair, int64 ``[i, j]`` or ``[b, i, j]``.

        Shaw: clip(j − i, k) + k, with j − i the key's position minus the query's. BERT: (i − j) + L − 1.

        Raises:
            ValueError: (BERT's variants) a pair farther apart than max_len − 1; under torch.compile
                the same check runs on the device (a RuntimeError).
        """
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        distance = q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)  # [(b,) i, j]: query − key
        if self.variant == "shaw":
            k = self.max_distance
            return (-distance).clamp(-k, k) + k  # the paper's clip(j − i, k), shifted to a row
        limit = self.max_len - 1
        message = f"variant {self.variant!r} holds query − key distances −{limit} … {limit} (max_len={self.max_len})"
        if torch.compiler.is_compiling():  # reading a value would be a host sync
            check_on_device(distance.abs() <= limit, message)
        else:
            outside = distance[distance.abs() > limit]
            if outside.numel():
                raise ValueError(f"{message}, got {int(outside[0])}")
        return distance + limit

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
        """q_i·w_row(i,j) / √d (and k_j·e_row(i,j) / √d for ``relative_key_query``): ``[b, h, i, j]``.

        q ``[b, h, i, d]``, k ``[b, h_kv, j, d]``; positions ``[i]`` / ``[b, i]`` and ``[j]`` / ``[b, j]``
        (:func:`~posenc.encodings.base.query_key_positions`). Computed per table row (``q @ wᵀ``,
        ``[b, h, i, rows]``) and gathered by each pair's row.
        """
        q, k = self._checked_heads(q, k)
        rows = self.rows(*query_key_positions(q, k, q_positions, k_positions))  # [(b,) i, j]
        table = self.key_table.to(q.dtype)  # [rows, d]
        terms = gather_rows(q @ table.T, rows)  # [b, h, i, j]
        if self.variant == "relative_key_query":
            keys = gather_rows(k @ table.T, rows.transpose(-1, -2))  # k_j·e_row(i,j): [b, h_kv, j, i]
            groups = q.shape[1] // k.shape[1]
            terms = terms + keys.repeat_interleave(groups, dim=1).transpose(-1, -2)
        return terms / math.sqrt(self.d_head)

    def block_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable | None = None,
        content: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> BlockTerms | None:
        """:meth:`score_terms` for one block of queries at a time (``posenc.kernels.query_blocked``); for
        Shaw's clipped table in causal attention over the same consecutive positions, the band of 2K + 1
        diagonals and flash attention over the far keys (``posenc.kernels.banded``). None with relative
        values (the output then needs the weights themselves)."""
        if self.values:
            return None
        q, k = self._checked_heads(q, k)
        q_positions, k_positions = query_key_positions(q, k, q_positions, k_positions)
        term_scale = 1 / math.sqrt(self.d_head)
        key_query = self.variant == "relative_key_query"

        def block(q_rows, k_keys, rows, keys, table):
            index = self.rows(q_positions[..., rows], k_positions[..., keys])  # [(b,) n, m]
            terms = gather_rows(q_rows @ table.T, index)  # [b, h, n, m]
            if key_query:
                by_key = gather_rows(k_keys @ table.T, index.transpose(-1, -2))  # [b, h_kv, m, n]
                groups = q_rows.shape[1] // k_keys.shape[1]
                terms = terms + by_key.repeat_interleave(groups, dim=1).transpose(-1, -2)
            return terms * term_scale

        table = self.key_table.to(q.dtype)
        direct = None
        if self.variant == "shaw" and _same_consecutive(q, k, q_positions, k_positions):

            def direct(q, k, v, *, causal, scale):  # the band of 2K + 1 diagonals and the far keys
                if not causal:
                    return None
                return clipped_relative_attention(
                    q, k, v, table, self.max_distance, scale=scale, term_scale=term_scale
                )

        return BlockTerms(block, (table,), direct=direct)

    def value_terms(
        self, weights: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> torch.Tensor | None:
        """Σ_j α_ij·w^V_clip(j − i, k), ``[b, h, i, d]``, from the weights α ``[b, h, i, j]``; None
        without relative values. The weights are summed per table row first (``[b, h, i, 2k + 1]``)."""
        if not self.values:
            return None
        positions = query_key_positions(weights, weights, q_positions, k_positions, key_dim=3)
        rows = self.rows(*positions)  # [(b,) i, j]
        per_row = sum_by_row(weights, rows, self.n_rows)  # [b, h, i, rows]
        return per_row @ self.value_table.to(weights.dtype)  # [b, h, i, d]

    def _checked_heads(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = check_float_tensor("q", q), check_float_tensor("k", k)
        if q.dim() != 4 or k.dim() != 4 or q.shape[-1] != self.d_head or k.shape[-1] != self.d_head:
            raise ValueError(
                f"q and k must be [b, h, s, d_head={self.d_head}], got {tuple(q.shape)} and {tuple(k.shape)}"
            )
        return q, k

    def extra_repr(self) -> str:
        size = f"max_distance={self.max_distance}" if self.variant == "shaw" else f"max_len={self.max_len}"
        return f"d_head={self.d_head}, variant={self.variant!r}, {size}, values={self.values}"


#: What posenc says about :class:`ShawRelativePosition` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Shaw",
    where_it_acts="reads q: q·a^K of the clipped distance; optionally relative values",
    used_by="Shaw et al., BERT's relative_key",
    parameter_formula="(2k+1)·d/h, twice with values (k = max_distance, 16 by default; independent of L); "
    "BERT's variants (2L−1)·d/h",
    figures={
        "logit-shift": "Flat at zero: the term q_i·w_clip(j − i) reads only the distance j − i, so shifting "
        "every position leaves the logits unchanged."
    },
)
