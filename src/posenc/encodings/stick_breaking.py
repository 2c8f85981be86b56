"""Stick-breaking attention: weights that each earlier key breaks off what is left, no softmax, no positions.

Tan, Shen, Yang, Courville and Panda, 2025, "Scaling Stick-Breaking Attention: An Efficient Implementation
and In-depth Study", https://arxiv.org/abs/2410.17980 (ICLR 2025): A_ij = β_ij·Π_{j<l<i}(1 − β_il),
β_ij = σ(q_i·k_j/√d), for the keys j < i (:func:`posenc.functional.stick_breaking.stick_breaking_log_weights`).

posenc's attention normalises with a softmax on every backend; the weights reach it as log-weights whose
softmax they are. The terms added to the logits make them log A_ij for the keys before the query and log
rem_i (the stick left over, Π_{l<i}(1 − β_il)) on the query's own key, so each row sums to 1 and the
softmax gives A_ij back exactly: Σ_j A_ij + rem_i = 1. The leftover weight then sits on the query's own
value; the paper's output Σ_{j<i} A_ij·v_j drops it, which ``output_terms`` does (−rem_i·v_i);
``remainder="self"`` keeps it there instead (the token's own value takes what the earlier ones left).

Notation used for tensor shapes: b batch, h heads, h_kv key/value heads, i / j query / key positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from posenc._validation import check_choice
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.capabilities import declare
from posenc.encodings.description import Description
from posenc.functional.stick_breaking import stick_breaking_log_weights
from posenc.kernels import query_blocked
from posenc.kernels.query_blocked import BlockTerms

PAPER = (
    'Tan, Shen, Yang, Courville and Panda, 2025, "Scaling Stick-Breaking Attention", '
    "https://arxiv.org/abs/2410.17980"
)
#: Where the stick left over after the earliest key goes: nowhere (the paper's Σ_{j<i} A_ij·v_j), or to
#: the query's own value.
REMAINDERS = ("drop", "self")


class StickBreaking(PositionalEncoding):
    """Stick-breaking attention (Tan et al., 2025, https://arxiv.org/abs/2410.17980) through the one interface.

    ``score_terms`` turns q·kᵀ/√d into the log-weights (log A_ij for j < i, log rem_i on the diagonal,
    −inf after it), so every backend's softmax gives the stick-breaking weights; ``output_terms`` removes
    the leftover stick from the query's own value (``remainder="drop"``, the paper's output). Both read q
    and k only: a KV cache needs nothing beyond the keys, and shifting the positions changes nothing
    (``contextual_positions``): the order of the keys is all it sees. The weights read the logit scale of
    the layer (``logit_scale``, 1/√d).

    Defined for causal attention only (the keys before the query): ``model_arguments(causal=False)`` is
    refused, and an instance placed in bidirectional attention by hand still weighs the keys before the
    query only. Packed documents are refused (``follows_documents``): the leftover stick would run over
    the earlier documents' keys.

    Args:
        remainder: ``"drop"`` (default, the paper's output) or ``"self"``.

    Raises:
        ValueError: a remainder outside :data:`REMAINDERS`.
    """

    kind = "bias"
    capabilities = declare(contextual_positions=True, follows_documents=False)
    views = frozenset()

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """No sizes: the weights are read from q and k.

        Raises:
            ValueError: ``causal=False``: the stick is broken over the keys before the query.
        """
        if not causal:
            raise ValueError(
                f"stick-breaking breaks the stick over the keys before the query, j < i ({PAPER}); the paper "
                "defines no bidirectional form: causal=False is refused"
            )
        return {}

    def __init__(self, *, remainder: str = "drop") -> None:
        super().__init__()
        self.remainder = check_choice("remainder", remainder, REMAINDERS)

    def _terms(self, q: torch.Tensor, k: torch.Tensor, first: int | None = None) -> torch.Tensor:
        """log-weights − z ``[b, h, i, j]`` for the queries at keys ``first`` … (default: the last i)."""
        dtype = torch.promote_types(q.dtype, torch.float32)  # as attention's eager scores
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # [b, h, j, d]
        logits = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * self.logit_scale(q.shape[-1])  # [b, h, i, j]
        log_weights, log_rest = stick_breaking_log_weights(logits, first)
        queries, keys = logits.shape[-2], logits.shape[-1]
        first = keys - queries if first is None else first
        own = (
            torch.arange(keys, device=q.device)
            == torch.arange(first, first + queries, device=q.device)[:, None]
        )
        log_weights = torch.where(own, log_rest[..., None], log_weights)  # [b, h, i, j]
        return log_weights - logits

    def score_terms(self, q, k, q_positions, k_positions, *, project=None) -> torch.Tensor:
        """log-weights − z ``[b, h, i, j]``: log A_ij for the keys before the query, log rem_i on its own key,
        −inf after it (z the scaled logits attention adds them to)."""
        return self._terms(q, k)

    def block_terms(self, q, k, q_positions, k_positions, *, project=None, content=None) -> BlockTerms:
        """:meth:`score_terms` for one block of queries and the keys up to its last query at a time
        (:class:`posenc.kernels.query_blocked.BlockTerms`): each row's weights read only its own logits."""
        offset = k.shape[2] - q.shape[2]  # the queries are the last i of the keys

        def block(q_rows, k_keys, rows, keys):
            return self._terms(q_rows, k_keys, offset + rows.start - keys.start)

        return BlockTerms(block)

    def output_terms(self, q, k, v, q_positions, k_positions) -> torch.Tensor | None:
        """−rem_i·v_i ``[b, h, i, d]`` (``remainder="drop"``): the leftover stick off the query's own value.

        log rem_i = Σ_{l<i} log(1 − β_il) is summed a block of queries at a time (the queries past
        :data:`posenc.kernels.query_blocked.DEFAULT_BLOCK` against the keys up to the block's last one),
        each block recomputed in the backward (``torch.utils.checkpoint``), so no ``[b, h, i, j]`` tensor is
        held at once, in inference or in training."""
        if self.remainder == "self":
            return None
        dtype = torch.promote_types(q.dtype, torch.float32)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # [b, h, j, d]
        queries, keys = q.shape[2], k.shape[2]
        block = query_blocked.DEFAULT_BLOCK
        several = queries > block  # one block would hold every pair anyway: nothing to recompute
        recompute = several and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
        parts = []
        for start in range(0, queries, block):  # [b, h, n] each
            stop = min(start + block, queries)
            args = (
                q[:, :, start:stop].to(dtype),
                k[:, :, : keys - queries + stop].to(dtype),
                keys - queries + start,
            )
            parts.append(
                checkpoint(self._log_rest, *args, use_reentrant=False) if recompute else self._log_rest(*args)
            )
        log_rest = torch.cat(parts, dim=-1)  # [b, h, i]: Σ_{l<i} log(1 − β_il)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)  # [b, h, j, d]
        own = v[:, :, v.shape[2] - q.shape[2] :].to(log_rest.dtype)  # [b, h, i, d]: each query's own value
        return -log_rest.exp()[..., None] * own

    def _log_rest(self, q_rows: torch.Tensor, k_keys: torch.Tensor, first: int) -> torch.Tensor:
        """Σ_{l<i} log(1 − β_il) ``[b, h, n]`` for the queries ``q_rows`` ``[b, h, n, d]`` at keys ``first`` …,
        from the keys ``k_keys`` ``[b, h, m, d]`` up to the last of them."""
        logits = (q_rows @ k_keys.transpose(-1, -2)) * self.logit_scale(q_rows.shape[-1])  # [b, h, n, m]
        n, m = logits.shape[-2], logits.shape[-1]
        before = (
            torch.arange(m, device=logits.device)
            < torch.arange(first, first + n, device=logits.device)[:, None]
        )
        return torch.where(before, F.logsigmoid(-logits), 0.0).sum(-1)

    def extra_repr(self) -> str:
        return f"remainder={self.remainder!r}"


DESCRIPTION = Description(
    label="stick-breaking",
    where_it_acts="replaces the softmax: A_ij = β_ij·Π_(j<l<i)(1 − β_il), β = σ(q·k/√d), no positions",
    used_by="Stick-breaking attention",
    parameter_formula="0",
    specimen_kwargs={},
    figures={
        "attention-weights": "The stick-breaking weights of a fixed random input, per head: the nearest "
        "earlier keys take their share first; the diagonal holds the stick left over (rem_i), which the "
        "paper's output drops.",
        "logit-shift": "Every change is exactly 0: the weights are read from q and k and the order of the "
        "keys, never from the positions given.",
    },
)


__all__ = ["REMAINDERS", "StickBreaking"]
