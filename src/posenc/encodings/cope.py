"""CoPE: contextual position encoding, positions counted by gates on q·k rather than read from indices."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import nn

from posenc._validation import check_float_tensor, check_nonnegative_float, check_positive_int
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.capabilities import declare
from posenc.encodings.description import Description
from posenc.kernels.query_blocked import BlockTerms

PAPER = (
    'Golovneva, Wang, Weston and Sukhbaatar, 2024, "Contextual Position Encoding: Learning to Count '
    "What's Important\", https://arxiv.org/abs/2405.18719"
)


def interpolate_position_logits(position_logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """q_i·e(p_ij) from the logits of the integer positions, without any ``[..., i, j, d]`` tensor.

    With z_i[n] = q_i·e[n] for n = 0 … npos_max − 1 (``position_logits`` ``[..., i, npos_max]``) and
    counted positions p_ij (``positions`` ``[..., i, j]``, within 0 … npos_max − 1), the interpolated
    embedding e(p) = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋] is linear in e, so
    q_i·e(p_ij) = (p − ⌊p⌋)·z_i[⌈p⌉] + (1 − p + ⌊p⌋)·z_i[⌊p⌋]: two gathers from z, as the paper's
    code listing computes it. Gradients reach z through the gathers and p through the weight p − ⌊p⌋.

    Returns:
        ``[..., i, j]`` in the dtype of ``position_logits``.
    """
    floor = positions.floor()
    weight = (positions - floor).to(position_logits.dtype)  # [..., i, j]: p − ⌊p⌋, differentiable in p
    at_floor = position_logits.gather(-1, floor.long())  # [..., i, j]: z_i[⌊p_ij⌋]
    at_ceil = position_logits.gather(-1, positions.ceil().long())  # [..., i, j]: z_i[⌈p_ij⌉]
    return weight * at_ceil + (1 - weight) * at_floor


class ContextualPositionEncoding(PositionalEncoding):
    """CoPE (Golovneva et al., 2024, https://arxiv.org/abs/2405.18719): positions counted by gates.

    Each query i decides, through a gate per key, which of the keys it sees count as a step of position,
    and attends by that count (Golovneva et al., 2024, §3, and their code listing):

    - gates ``g_ij = σ(q_i·k_j/√d)`` for the keys j ≤ i the (causal) query sees, 0 for the others; the
      gates read the *scaled* logit q·k/√d, as the paper's listing (``sigmoid(attn_logits)`` after
      dividing by √d) and the authors' code (facebookresearch/RAM, ``projects/cope``) do;
    - counted positions ``p_ij = min(Σ_{t=j}^{i} g_it, npos_max − 1)``: the clamp is part of the
      formula (§3 bounds the positions by p_max; the listing clamps at npos_max − 1): a count beyond the
      table takes the last embedding e[npos_max − 1], and no gradient flows through a clamped count;
    - the interpolated embedding ``e(p) = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]`` of learned rows
      e[0 … npos_max − 1] of the head width;
    - the logit term ``q_i·e(p_ij)``, added to q_i·k_j/√d unscaled (as the listing adds it after the
      division; the authors' code by default divides the sum by √d instead, which is this with e/√d).

    If every gate were 1, p_ij = i − j + 1: token-count relative positions. The term is computed as
    z = q·eᵀ ``[b, h, i, npos_max]`` and interpolated by two gathers
    (:func:`interpolate_position_logits`), never as ``[b, h, i, j, d]``; the gates and counts are
    ``[b, h, i, j]``, as the logits are.

    One table of npos_max × d_head is shared by the heads of a layer (the paper's listing applies one
    CoPE module to every head; so does the authors' code), while each head counts with its own gates.
    The table starts at zero, as in the paper's listing (CoPE then begins as no position encoding and
    learns its table); ``init_std`` draws it from N(0, init_std²) instead.

    Positions are counted from the content, so the positions attention is given are not read: shifting
    them changes nothing (``contextual_positions``). Which keys a query sees follows the causal mask on
    indices: the queries are the last i of the j keys (``KVCache`` decoding counts over the cached keys,
    equal to the full forward). The paper defines CoPE for causal attention only (p_ij for keys j ≤ i):
    a bidirectional model is refused (``model_arguments(causal=False)``). An instance placed in
    bidirectional attention by hand still counts over the keys up to the query, and gives keys after
    the query the term of position 0.

    Args:
        d_head: the width of each head (of q, k and of each embedding row); from ``table`` when given.
        npos_max: rows of the table, the counted positions 0 … npos_max − 1 (the paper's p_max + 1);
            from ``table`` when given. A model of max_len tokens gets max_len + 1 (``model_arguments``), so
            no count within max_len is clamped, as the authors' code does by default.
        init_std: standard deviation of the table's normal initialisation; 0 (the paper's) starts at zero.
        table: an explicit initial table ``[npos_max, d_head]`` (floating point, finite), copied.

    Raises:
        TypeError: a non-integer size, a table that is not a floating-point tensor.
        ValueError: npos_max or d_head below 1, neither sizes nor a table, a table whose rows or width
            differ from npos_max / d_head (fewer rows than npos_max: counts up to npos_max − 1 would have
            no embedding), a table with non-finite values, init_std with a table.
    """

    kind = "bias"
    capabilities = declare(contextual_positions=True)

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's head width and npos_max = max_len + 1 (a count reaches at most max_len).

        Raises:
            ValueError: ``causal=False``: the paper defines the counts over the keys before the query only.
        """
        if not causal:
            raise ValueError(
                "CoPE counts positions over the keys a causal query sees (p_ij = Σ_{t=j}^{i} g_it for "
                f"j ≤ i, {PAPER}, §3); the paper defines no bidirectional form: causal=False is refused"
            )
        return {"d_head": d_model // n_heads, "npos_max": max_len + 1}

    def __init__(
        self,
        *,
        d_head: int | None = None,
        npos_max: int | None = None,
        init_std: float = 0.0,
        table: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        init_std = check_nonnegative_float("init_std", init_std)
        if table is None:
            if d_head is None or npos_max is None:
                raise ValueError(
                    f"CoPE needs d_head and npos_max, or a table [npos_max, d_head]; got d_head={d_head!r}, "
                    f"npos_max={npos_max!r}"
                )
            self.d_head = check_positive_int("d_head", d_head)
            self.npos_max = check_positive_int("npos_max", npos_max)
            values = torch.randn(self.npos_max, self.d_head) * init_std if init_std else None
            self.table = nn.Parameter(torch.zeros(self.npos_max, self.d_head) if values is None else values)
            return
        if init_std:
            raise ValueError(f"init_std draws a table; got both a table and init_std={init_std}")
        table = self._checked_table(table, d_head, npos_max)
        self.npos_max, self.d_head = table.shape
        self.table = nn.Parameter(table.detach().clone())  # [npos_max, d_head]

    @staticmethod
    def _checked_table(table: torch.Tensor, d_head: int | None, npos_max: int | None) -> torch.Tensor:
        table = check_float_tensor("table", table)
        if table.dim() != 2 or 0 in table.shape:
            raise ValueError(
                f"table must be [npos_max, d_head] with both ≥ 1, got shape {tuple(table.shape)}"
            )
        rows, width = table.shape
        if d_head is not None and check_positive_int("d_head", d_head) != width:
            raise ValueError(f"table rows have width {width}, but d_head={d_head}")
        if npos_max is not None:
            npos_max = check_positive_int("npos_max", npos_max)
            if rows < npos_max:
                raise ValueError(
                    f"npos_max={npos_max} is more positions than the table's {rows} rows: counted positions "
                    f"up to {npos_max - 1} would have no embedding"
                )
            if rows > npos_max:
                raise ValueError(
                    f"the table has {rows} rows but npos_max={npos_max}: counts clamp at {npos_max - 1}, so "
                    f"rows {npos_max} … {rows - 1} would never be read"
                )
        if not bool(torch.isfinite(table).all()):
            raise ValueError("table must be finite, got non-finite values")
        return table

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        """npos_max·d_head: this instance's rows (counts clamp there, whatever L), of the head width
        d_model / n_heads where both are given, else this instance's d_head."""
        d_head = d_model // n_heads if d_model and n_heads else self.d_head
        return self.npos_max * d_head

    # --- the formula, one step each -----------------------------------------------------------------

    def _checked(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[b, h, i, d]`` and k ``[b, h_kv, j, d]`` in one compute dtype (float32 at least), k's heads
        repeated to q's: ``[b, h, j, d]``."""
        q, k = check_float_tensor("q", q), check_float_tensor("k", k)
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(
                f"q and k must be [b, h, s, d_head], got shapes {tuple(q.shape)} and {tuple(k.shape)}"
            )
        for name, x in (("q", q), ("k", k)):
            if x.shape[-1] != self.d_head:
                raise ValueError(f"{name} has heads of width {x.shape[-1]}, but CoPE's d_head={self.d_head}")
        if q.shape[0] != k.shape[0] or q.shape[1] % k.shape[1]:
            raise ValueError(
                f"k must have q's batch and a number of heads dividing q's, got q {tuple(q.shape)}, "
                f"k {tuple(k.shape)}"
            )
        if k.shape[2] < q.shape[2]:
            raise ValueError(
                f"the queries are the last of the keys: {q.shape[2]} queries need at least as many keys, "
                f"got {k.shape[2]}"
            )
        dtype = torch.promote_types(q.dtype, torch.float32)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # [b, h, j, d]
        return q.to(dtype), k.to(dtype)

    def gates(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """g_ij = σ(q_i·k_j/√d) for the keys each query sees (the queries are the last i of the j keys),
        0 for the keys after it: ``[b, h, i, j]`` from q ``[b, h, i, d]`` and k ``[b, h_kv, j, d]``."""
        q, k = self._checked(q, k)
        q_len, k_len = q.shape[2], k.shape[2]
        seen = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril(diagonal=k_len - q_len)
        gates = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(self.d_head))  # [b, h, i, j]
        return gates.masked_fill(~seen, 0.0)

    def counted_positions(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """p_ij = min(Σ_{t=j}^{i} g_it, npos_max − 1): how many keys from j to the query count, by the
        query's gates, ``[b, h, i, j]`` (0 for keys after the query). The view the figures read."""
        gates = self.gates(q, k)  # [b, h, i, j]
        counts = gates.flip(-1).cumsum(dim=-1).flip(-1)  # Σ over t ≥ j; the gates after the query are 0
        return counts.clamp(max=self.npos_max - 1)

    def position_logits(self, q: torch.Tensor) -> torch.Tensor:
        """z_i[n] = q_i·e[n] for every row n of the table: ``[b, h, i, npos_max]`` (float32 at least)."""
        q = check_float_tensor("q", q)
        dtype = torch.promote_types(q.dtype, torch.float32)
        return q.to(dtype) @ self.table.to(dtype).T

    def score_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable | None = None,
    ) -> torch.Tensor:
        """q_i·e(p_ij) ``[b, h, i, j]`` (float32 at least) for queries ``[b, h, i, d]`` and keys
        ``[b, h_kv, j, d]``, the queries being the last i of the keys; the positions are not read.

        Raises:
            TypeError: non-float q or k.
            ValueError: shapes that are not ``[b, h, s, d_head]``, heads that do not divide, fewer keys
                than queries.
        """
        positions = self.counted_positions(q, k)  # [b, h, i, j]
        return interpolate_position_logits(self.position_logits(q), positions)

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
        """:meth:`score_terms` for one block of queries at a time (``posenc.kernels.query_blocked``): a
        query's count reads only its own gates, so a block counts over the keys it sees, as the whole does.
        The block's gradient is written out (:meth:`_block_grad`), the chain rule of the formula."""
        self._checked(q[:, :, :1], k)  # the shapes' checks, once
        offset = k.shape[2] - q.shape[2]  # the queries are the last of the keys
        return BlockTerms(
            functools.partial(self._block_terms, offset),
            (self.table,),
            with_grad=functools.partial(self._block_with_grad, offset),
        )

    def _block_counts(self, offset: int, q_rows, k_keys, rows: slice, keys: slice):
        """Gates g ``[b, h, n, m]`` (0 after the query), the counts p before the clamp, and q, k in the
        compute dtype (k's heads repeated)."""
        q_rows, k_keys = self._checked(q_rows, k_keys)  # [b, h, n, d], [b, h, m, d]
        query = torch.arange(offset + rows.start, offset + rows.stop, device=q_rows.device)
        key = torch.arange(keys.start, keys.stop, device=q_rows.device)
        gates = torch.matmul(q_rows, k_keys.transpose(-1, -2)).mul_(1 / math.sqrt(self.d_head)).sigmoid_()
        later = max(0, offset + rows.start + 1 - keys.start)  # keys before it precede every query here
        gates[..., later:].masked_fill_(key[None, later:] > query[:, None], 0.0)
        counts = gates.flip(-1).cumsum(dim=-1).flip(-1)  # Σ_{t ≥ j} g_it
        return gates, counts, q_rows, k_keys

    def _block_terms(self, offset: int, q_rows, k_keys, rows: slice, keys: slice, table):
        """q_i·e(p_ij) of a block, ``[b, h, n, m]`` (no autograd: :meth:`_block_with_grad` gives its gradient)."""
        _, counts, q_rows, _ = self._block_counts(offset, q_rows, k_keys, rows, keys)
        counts.clamp_(max=self.npos_max - 1)
        logits = q_rows @ table.to(q_rows.dtype).T  # z [b, h, n, npos_max]
        following = torch.cat((logits[..., 1:], logits[..., -1:]), dim=-1)  # z[min(r + 1, npos_max − 1)]
        floor = counts.floor()
        low = floor.long()
        # z[⌊p⌋] + (p − ⌊p⌋)·(z[⌈p⌉] − z[⌊p⌋]): ⌈p⌉ = ⌊p⌋ + 1 wherever the weight is not 0
        return torch.lerp(logits.gather(-1, low), following.gather(-1, low), counts.sub_(floor))

    def _block_with_grad(self, offset: int, q_rows, k_keys, rows: slice, keys: slice, table):
        """:meth:`_block_terms` and a function giving (dq_rows, dk_keys, (dtable,)) from the terms' gradient
        ``[b, h, n, m]``: the chain rule of the formula, through the interpolation, the clamp (none past
        it), the reversed running sum and the sigmoid."""
        h_kv = k_keys.shape[1]
        gates, counts, q_wide, k_wide = self._block_counts(offset, q_rows, k_keys, rows, keys)
        limit = self.npos_max - 1
        clamped = counts > limit  # no gradient through a clamped count
        counts.clamp_(max=limit)
        table = table.to(q_wide.dtype)
        logits = q_wide @ table.T  # z [b, h, n, npos_max]
        floor = counts.floor()
        low, high = floor.long(), counts.ceil().long()
        weight = counts.sub_(floor)  # p − ⌊p⌋
        at_low, at_high = logits.gather(-1, low), logits.gather(-1, high)
        terms = torch.lerp(at_low, at_high, weight)  # as _block_terms rounds it

        def backward(d_terms):
            d_terms = d_terms.to(q_wide.dtype)
            d_logits = torch.zeros_like(logits)
            d_logits.scatter_add_(-1, low, d_terms * (1 - weight)).scatter_add_(-1, high, d_terms * weight)
            d_counts = at_high.sub_(at_low).mul_(d_terms).masked_fill_(clamped, 0.0)
            d_gates = d_counts.cumsum(dim=-1)  # g_it counts for every key j ≤ t
            d_scores = (
                d_gates.mul_(gates).mul_(1 - gates).mul_(1 / math.sqrt(self.d_head))
            )  # 0 after the query
            dq = torch.matmul(d_scores, k_wide).add_(d_logits @ table)
            dk = torch.matmul(d_scores.transpose(-1, -2), q_wide)  # [b, h, m, d]
            b, h, m, d = dk.shape
            dk = dk.view(b, h_kv, h // h_kv, m, d).sum(dim=2) if h != h_kv else dk
            d_table = (d_logits.transpose(-1, -2) @ q_wide).sum(dim=(0, 1))  # [npos_max, d]
            return dq, dk, (d_table,)

        return terms, backward

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, npos_max={self.npos_max}"


#: What posenc says about :class:`ContextualPositionEncoding` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="CoPE",
    where_it_acts="reads q and k: q·e(p) at positions counted by gates σ(q·k)",
    used_by="CoPE",
    parameter_formula="npos_max·d_head (one table shared by the heads; npos_max a setting, L + 1 in a model)",
    specimen_kwargs={"d_head": 8, "npos_max": 65, "init_std": 0.5},
    figures={
        "counted-positions": None,
        "logit-shift": "Every change is exactly 0: CoPE counts positions from q·k through its gates and the "
        "causal mask, and never reads the positions it is given. This measures that the given positions are "
        "unused, not that CoPE is blind to order: its count of gated keys is a contextual relative position.",
    },
)


__all__ = ["ContextualPositionEncoding", "interpolate_position_logits"]
