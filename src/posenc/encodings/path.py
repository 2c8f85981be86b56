"""PaTH: keys carried to their query through Householder transforms read from the tokens between them.

Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, 2025, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", https://arxiv.org/abs/2505.16381 (NeurIPS 2025). Each token t
gives a transform H_t = I − β_t·w_t·w_tᵀ, w_t = W_w·x_t / ‖W_w·x_t‖ per head and β_t = 2σ(w_β·x_t + b) ∈
(0, 2), read from the attention layer's input; the logit of query i and key j ≤ i is

    q_iᵀ·(H_i ⋯ H_{j+1})·k_j / √d        (:mod:`posenc.functional.path`)

RoPE's q_iᵀ·R^(i−j)·k_j with a rotation that each token chooses: where every H_t is one fixed matrix the
logit depends on i − j alone, and otherwise on the content between key and query, never on the positions
given (``contextual_positions``).

Notation used for tensor shapes: b batch, s sequence, h heads, h_kv key/value heads, d head width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc._validation import check_float_tensor, check_positive_int
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.capabilities import declare
from posenc.encodings.description import Description
from posenc.functional.path import path_scores_chunked, path_scores_eager
from posenc.kernels.query_blocked import BlockTerms

PAPER = (
    'Yang et al., 2025, "PaTH Attention: Position Encoding via Accumulating Householder Transformations", '
    "https://arxiv.org/abs/2505.16381"
)
#: Tokens per block of the chunked form: its steps hold O(s·(d + C)) numbers besides the logits.
DEFAULT_CHUNK = 64


class PaTH(PositionalEncoding):
    """PaTH (Yang et al., 2025, https://arxiv.org/abs/2505.16381) through the one interface.

    ``content(x)`` reads each token's unit vectors w_t ``[h, d]`` and strengths β_t ``[h]`` from the layer
    input, ``[b, s, h·d + h]``; ``content_terms`` gives q_iᵀ(H_i ⋯ H_{j+1})k_j/√d − q_i·k_j/√d (what PaTH's
    logit adds to the plain one), −inf for the keys after the query. A KV cache keeps each token's w and
    β with its key, so a query after it is carried through the cached tokens' transforms as in the full
    forward (through the kept tokens' alone, in a cache keeping sinks and a window). The projections are learned and belong to one layer: give each layer its own
    (``TransformerLM(share_encoding=False)``).

    ``chunk``: the chunked (UT) form with blocks of that many tokens (default :data:`DEFAULT_CHUNK`),
    whose steps hold O(s·(d + C)) numbers beside the logits; None: the eager form, which holds every key
    as each query sees it, O(s²·d). Both give the same logits.

    PaTH is defined for causal attention: ``model_arguments(causal=False)`` is refused; an instance placed
    in bidirectional attention by hand still hides the keys after the query (the CPU sdpa path, a block of
    queries at a time, refuses it).

    Args:
        d_model: the width of the layer input the transforms are read from.
        n_heads: one transform per head and token.
        d_head: the head width the transforms act on (default d_model / n_heads).
        chunk: tokens per block, or None.

    Raises:
        TypeError: a non-integer size.
        ValueError: a size below 1, a d_model not divisible by n_heads without d_head.
    """

    kind = "bias"
    capabilities = declare(contextual_positions=True)
    views = frozenset()

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's width, heads and head width.

        Raises:
            ValueError: ``causal=False``: the transforms run from the key to the query after it.
        """
        if not causal:
            raise ValueError(
                f"PaTH carries a key to the query after it through H_(j+1) … H_i ({PAPER}); the paper defines "
                "no bidirectional form: causal=False is refused"
            )
        return {"d_model": d_model, "n_heads": n_heads, "d_head": d_model // n_heads}

    def __init__(
        self, *, d_model: int, n_heads: int, d_head: int | None = None, chunk: int | None = DEFAULT_CHUNK
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.n_heads = check_positive_int("n_heads", n_heads)
        if d_head is None and d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}, or give d_head")
        self.d_head = d_model // n_heads if d_head is None else check_positive_int("d_head", d_head)
        self.chunk = None if chunk is None else check_positive_int("chunk", chunk)
        self.direction = nn.Linear(
            self.d_model, self.n_heads * self.d_head, bias=False
        )  # x -> w (before ‖·‖)
        self.strength = nn.Linear(self.d_model, self.n_heads)  # x -> logit of β / 2

    def content(self, x: torch.Tensor) -> torch.Tensor:
        """[w_t, β_t] ``[b, s, h·d + h]`` from the layer input x ``[b, s, d_model]``: the unit vectors of every
        head, then the strengths 2σ(·) ∈ (0, 2)."""
        x = check_float_tensor("x", x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have d_model={self.d_model} channels, got shape {tuple(x.shape)}")
        b, s = x.shape[0], x.shape[1]
        w = F.normalize(self.direction(x).view(b, s, self.n_heads, self.d_head), dim=-1)  # [b, s, h, d]
        beta = 2 * torch.sigmoid(self.strength(x))  # [b, s, h]
        return torch.cat((w.flatten(2), beta), dim=-1)

    def _transforms(self, k_content: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(w ``[b, h, j, d]``, β ``[b, h, j]``) from the keys' content ``[b, j, h·d + h]``, in ``dtype``."""
        b, keys = k_content.shape[0], k_content.shape[1]
        width = self.n_heads * self.d_head
        w = k_content[..., :width].view(b, keys, self.n_heads, self.d_head).transpose(1, 2).to(dtype)
        return w, k_content[..., width:].transpose(1, 2).to(dtype)

    def _terms(self, q, k, w, beta, first: int) -> torch.Tensor:
        """The terms for queries ``[b, h, i, d]`` standing at keys ``first`` … of k ``[b, h_kv, j, d]``."""
        dtype = w.dtype
        q = q.to(dtype)
        k = k.repeat_interleave(self.n_heads // k.shape[1], dim=1).to(dtype)  # [b, h, j, d]
        queries, keys = q.shape[2], k.shape[2]
        if first + queries != keys:  # the forms carry the last i of the keys: the keys end at the last query
            raise ValueError(
                f"PaTH's logits read the keys up to the last query (causal attention); got {queries} queries "
                f"from key {first} among {keys} keys"
            )
        if self.chunk is None:
            scores = path_scores_eager(q, k, w, beta)
        else:
            scores = path_scores_chunked(q, k, w, beta, chunk=self.chunk)
        terms = (scores - q @ k.transpose(-1, -2)) * self.logit_scale(self.d_head)  # [b, h, i, j]
        after = torch.arange(keys, device=q.device) > torch.arange(first, keys, device=q.device)[:, None]
        return terms.masked_fill(after, float("-inf"))

    def block_terms(self, q, k, q_positions, k_positions, *, project=None, content=None) -> BlockTerms | None:
        """The terms for one block of queries and the keys up to its last query at a time
        (:class:`posenc.kernels.query_blocked.BlockTerms`), so attention's CPU sdpa path holds
        ``[b, h, block, j]`` logits at most; causal attention only (the keys end at the block's last query).
        None without the content (the transforms are read from it)."""
        if content is None:
            return None
        k_content = content[1]  # [b, j, h·d + h]
        self._check_heads(q)
        offset = k_content.shape[1] - q.shape[2]  # the queries are the last i of the keys
        w, beta = self._transforms(k_content, torch.promote_types(q.dtype, torch.float32))

        def block(q_rows, k_keys, rows, keys, w, beta):
            return self._terms(
                q_rows, k_keys, w[:, :, keys], beta[:, :, keys], offset + rows.start - keys.start
            )

        return BlockTerms(block, (w, beta))

    def _check_heads(self, q: torch.Tensor) -> None:
        if q.shape[1] != self.n_heads or q.shape[-1] != self.d_head:
            raise ValueError(
                f"PaTH's transforms act on {self.n_heads} heads of width {self.d_head}; got queries of shape "
                f"{tuple(q.shape)}"
            )

    def content_terms(self, q, k, q_content, k_content) -> torch.Tensor:
        """q_iᵀ(H_i ⋯ H_{j+1})k_j·scale − q_i·k_j·scale ``[b, h, i, j]`` (−inf after the query), from the keys'
        content ``[b, j, h·d + h]``; q ``[b, h, i, d]``, k ``[b, h_kv, j, d]``."""
        self._check_heads(q)
        w, beta = self._transforms(k_content, torch.promote_types(q.dtype, torch.float32))
        return self._terms(q, k, w, beta, k_content.shape[1] - q.shape[2])

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, chunk={self.chunk}"


DESCRIPTION = Description(
    label="PaTH",
    shared_by_layers=False,  # each layer learns its own Householder map (Yang et al. 2025)
    where_it_acts="carries each key to its query through Householders read from the content: q_iᵀ(H_i ⋯ H_(j+1))k_j",
    used_by="PaTH attention",
    parameter_formula="d·h·d_head + d·h + h per layer",
    specimen_kwargs={"d_model": 32, "n_heads": 4, "chunk": 8},
    figures={
        "content-terms": "What the Householder transforms between key and query add to each logit, q_iᵀ(H_i ⋯ "
        "H_(j+1))k_j/√d − q_i·k_j/√d, for one fixed random input: 0 on the diagonal (no transform between a "
        "token and itself), and read from the tokens between key and query elsewhere.",
        "attention-weights": None,
        "logit-shift": "Every change is exactly 0: the transforms are read from the content, never from the "
        "positions given.",
    },
)


__all__ = ["DEFAULT_CHUNK", "PaTH"]
