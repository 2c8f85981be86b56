"""DeBERTa's disentangled attention: content-to-position and position-to-content terms over relative buckets.

He, Liu, Gao and Chen, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", 2021,
https://arxiv.org/abs/2006.03654 (§3.1, Algorithm 1), with DeBERTa-v2/v3's log buckets, shared attention
key and normalised relative embeddings (the microsoft/DeBERTa release; DeBERTaV3, He, Gao and Chen,
2021, https://arxiv.org/abs/2111.09543, keeps that backbone).

Notation used for tensor shapes:
    b batch, h query heads, h_kv key heads, i / j query / key positions, d head width,
    S span (``position_buckets``, or ``max_relative_positions`` without buckets): 2S relative embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from posenc._validation import (
    check_bool,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding, query_key_positions
from posenc.encodings.description import Description
from posenc.kernels.query_blocked import BlockTerms

#: The position terms DeBERTa adds to the content term q·k (transformers' ``pos_att_type``).
TERMS = ("c2p", "p2c")


def check_buckets(position_buckets: int | None, max_relative_positions: int) -> tuple[int | None, int]:
    """``position_buckets`` (None: exact distances) and ``max_relative_positions``, checked together.

    Log buckets keep distances up to ``position_buckets // 2`` exact and spread the distances from there
    to ``max_relative_positions − 1`` logarithmically over the other buckets, which needs that range to
    be non-empty: ``max_relative_positions ≥ position_buckets // 2 + 2`` (otherwise the logarithm of the
    range is 0 or negative, and DeBERTa's formula divides by it).

    Raises:
        TypeError: a size that is not an int.
        ValueError: a non-positive size, ``position_buckets`` < 2 (no exact bucket beside distance 0),
            or a ``max_relative_positions`` the log buckets cannot reach (both values named).
    """
    max_relative_positions = check_positive_int("max_relative_positions", max_relative_positions)
    if position_buckets is None:
        return None, max_relative_positions
    position_buckets = check_positive_int("position_buckets", position_buckets)
    if position_buckets < 2:
        raise ValueError(
            f"position_buckets must be at least 2 (distances up to position_buckets // 2 are exact), "
            f"got {position_buckets}"
        )
    exact = position_buckets // 2
    if max_relative_positions < exact + 2:
        raise ValueError(
            f"max_relative_positions={max_relative_positions} cannot hold the log buckets of "
            f"position_buckets={position_buckets}: distances up to {exact} are exact, and the log buckets "
            f"spread {exact} … max_relative_positions − 1, so max_relative_positions must be at least "
            f"{exact + 2}"
        )
    return position_buckets, max_relative_positions


def deberta_log_bucket(
    relative_position: torch.Tensor, *, position_buckets: int, max_relative_positions: int
) -> torch.Tensor:
    """DeBERTa-v2's log bucket of each relative position (query − key), int64, same shape.

    With m = ``position_buckets`` // 2 and M = ``max_relative_positions``: a distance r with |r| ≤ m is
    its own bucket; a larger one goes to sign(r)·(m + ⌈ln(|r|/m) / ln((M − 1)/m) · (m − 1)⌉), so |r| = M − 1
    reaches 2m − 1 and farther distances keep growing slowly (the embedding index clamps them, see
    :meth:`DisentangledAttention.relative_index`). The logarithms are taken in float32 in DeBERTa's
    order of operations, so that the bucket at a rounding boundary is DeBERTa's.

    Raises:
        ValueError: sizes that do not fit together (:func:`check_buckets`).
    """
    position_buckets, max_relative_positions = check_buckets(position_buckets, max_relative_positions)
    exact = position_buckets // 2
    distance = relative_position.abs()
    far = distance > exact
    ratio = distance.clamp_min(exact).to(torch.float32) / exact  # ≥ 1: the log of the near ones is unused
    log_range = torch.tensor((max_relative_positions - 1) / exact, dtype=torch.float32).log()
    log_bucket = torch.ceil(ratio.log() / log_range * (exact - 1)).to(torch.int64) + exact
    return torch.where(far, relative_position.sign() * log_bucket, relative_position)


class DisentangledAttention(PositionalEncoding):
    """DeBERTa's disentangled attention (He et al., 2021, https://arxiv.org/abs/2006.03654, §3.1).

    A table of 2S relative embeddings P ``[2S, d_model]`` (LayerNorm'd first, as DeBERTa-v2/v3's
    ``norm_rel_ebd="layer_norm"``) is projected to relative keys K_r = P·W_k,r and relative queries
    Q_r = P·W_q,r, and the score of query i and key j is

        A_ij = (q_i·k_j  +  q_i·K_r[δ(i, j)]  +  k_j·Q_r[δ(i, j)]) / √(d·f)

    (content, content-to-position "c2p", position-to-content "p2c"), f = 1 + the number of position
    terms (3 with both). δ(i, j) = clamp(bucket(p_i − p_j) + S, 0, 2S − 1) indexes the table: the
    bucket is the distance itself (``position_buckets=None``: the paper's δ, clipped at ±k) or DeBERTa-v2's
    log bucket (:func:`deberta_log_bucket`); the clamp is part of DeBERTa's formula. The p2c term reads the
    table at the same δ(i, j) as c2p: this is what DeBERTa's code computes (it gathers at −δ(j, i) and
    transposes), where Algorithm 1 of the paper writes δ(j, i), its mirror image.

    ``share_att_key`` (DeBERTa-v2/v3): W_k,r and W_q,r are the attention layer's own key and query
    projections, biases included; posenc's attention passes them to :meth:`score_terms` as ``project``
    (``MultiHeadAttention.project_heads``). Without it the encoding owns ``pos_key_proj`` and
    ``pos_query_proj`` (Linear with bias, as DeBERTa). Where no layer gives ``project`` (the analysis
    probes of ``posenc.analysis``), a shared-key encoding uses P unprojected, split into heads: a term
    of the same relative structure, never what a layer computes.

    Scaling. posenc's attention adds ``score_terms`` to q·kᵀ/√d. To give DeBERTa's q·k/√(d·f) exactly,
    the terms carry a content correction (1/√f − 1)·q·kᵀ/√d, so that the content term becomes
    q·kᵀ/√(d·f), and the position terms their own 1/√(d·f). The correction costs one more q·kᵀ product;
    it replaces scaling q by 1/√f in ``rotate``, because the hooks of a bias encoding must leave q
    and k as they are.

    Memory never grows with s²·d: c2p is q·K_rᵀ ``[b, h, i, 2S]`` and then a gather at δ(i, j), p2c is
    k·Q_rᵀ ``[b, h_kv, j, (h/h_kv)·2S]`` and a gather; the largest tensors are the ``[b, h, i, j]`` terms
    and the int64 index ``[(b,) i, j]``. Every backend serves it (the terms are a float mask for SDPA, a
    lookup in flex's score_mod); it reads only q, k and positions, so KV-cache decoding equals the full
    forward. Not included: DeBERTa's absolute position embeddings (``position_biased_input``, off in v3)
    and the relative embeddings' dropout.

    Args:
        d_model: model width (the relative embeddings' width).
        n_heads: attention heads; d_head = d_model / n_heads.
        position_buckets: log buckets per side, S (256 in DeBERTa-v3); None: exact distances clipped at
            ±``max_relative_positions`` (DeBERTa v1, the paper's δ).
        max_relative_positions: the distance the log buckets reach at bucket S − 1 (512 in DeBERTa-v3), or
            the clip k without buckets.
        share_att_key: project the relative embeddings with the layer's own query and key projections.
        terms: the position terms, any of ``("c2p", "p2c")`` (transformers' ``pos_att_type``).
        layer_norm: LayerNorm the relative embeddings before projecting them (DeBERTa-v2/v3).
        layer_norm_eps: its epsilon (DeBERTa's 1e-7).
        init_std: standard deviation of the relative embeddings' normal initialisation (DeBERTa's
            ``initializer_range``); the projections start as PyTorch's Linear.

    Raises:
        TypeError, ValueError: sizes that are not positive ints, d_model not divisible by n_heads,
            buckets that do not fit ``max_relative_positions`` (:func:`check_buckets`), unknown or
            repeated terms.
    """

    kind = "bias"
    # The specimen owns its projections: analysis probes score_terms without an attention layer, and
    # would otherwise see the unprojected fallback of a shared key. No LayerNorm: its initial 1 and 0
    # are the same from every seed, and a specimen is drawn from its seed.

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """DeBERTa-v3's shape scaled to the model: S = max_len / 2 log buckets (at least 4, at most 256)
        reaching distance max_len − 1, a shared attention key, both terms."""
        buckets = min(256, max(4, max_len // 2))
        return {
            "d_model": d_model,
            "n_heads": n_heads,
            "position_buckets": buckets,
            "max_relative_positions": max(max_len, buckets // 2 + 2),
        }

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        position_buckets: int | None = 256,
        max_relative_positions: int = 512,
        share_att_key: bool = True,
        terms: Iterable[str] = TERMS,
        layer_norm: bool = True,
        layer_norm_eps: float = 1e-7,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.n_heads = check_positive_int("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_head = d_model // n_heads
        self.position_buckets, self.max_relative_positions = check_buckets(
            position_buckets, max_relative_positions
        )
        self.share_att_key = check_bool("share_att_key", share_att_key)
        self.terms = _check_terms(terms)
        self.layer_norm = check_bool("layer_norm", layer_norm)
        self.layer_norm_eps = check_positive_float("layer_norm_eps", layer_norm_eps)
        std = check_positive_float("init_std", init_std)
        self.relative_embeddings = nn.Parameter(torch.randn(2 * self.span, self.d_model) * std)  # [2S, d]
        self.norm = nn.LayerNorm(self.d_model, eps=self.layer_norm_eps) if self.layer_norm else None
        if not self.share_att_key:
            for term, name in (("c2p", "pos_key_proj"), ("p2c", "pos_query_proj")):
                if term in self.terms:
                    setattr(self, name, nn.Linear(self.d_model, self.d_model))

    # --- what it is -------------------------------------------------------------------------------

    @property
    def span(self) -> int:
        """S: ``position_buckets``, or ``max_relative_positions`` without buckets; the table has 2S rows."""
        return self.position_buckets or self.max_relative_positions

    @property
    def scale_factor(self) -> int:
        """f = 1 + the number of position terms: DeBERTa divides every term by √(d·f)."""
        return 1 + len(self.terms)

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        d = d_model or self.d_model
        projections = 0 if self.share_att_key else len(self.terms) * (d * d + d)
        return 2 * self.span * d + (2 * d if self.layer_norm else 0) + projections

    # --- the index --------------------------------------------------------------------------------

    def relative_index(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """δ(i, j) = clamp(bucket(p_i − p_j) + S, 0, 2S − 1): the row of the relative embeddings read by
        query i and key j, int64 ``[(b,) i, j]``.

        Raises:
            ValueError: positions that are not integers ``[n]`` / ``[b, n]``, or beyond ±2^62.
        """
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        relative = q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)  # [(b,) i, j]: query − key
        if self.position_buckets is not None:
            relative = deberta_log_bucket(
                relative,
                position_buckets=self.position_buckets,
                max_relative_positions=self.max_relative_positions,
            )
        return (relative + self.span).clamp(0, 2 * self.span - 1)

    # --- the terms --------------------------------------------------------------------------------

    def normed_embeddings(self) -> torch.Tensor:
        """The relative embeddings as the projections see them, LayerNorm'd where ``layer_norm``: ``[2S, d_model]``."""
        return self.relative_embeddings if self.norm is None else self.norm(self.relative_embeddings)

    def position_heads(
        self, project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Relative queries Q_r and keys K_r as heads ``[h, 2S, d]`` each (None for a term not used).

        ``project``: the layer's own projections (``[n, d_model] -> ([h, n, d], [h_kv, n, d])``), used with
        ``share_att_key``; shared keys of fewer heads are repeated for each group of query heads.
        """
        table = self.normed_embeddings()  # [2S, d_model]
        queries = keys = None
        if self.share_att_key and project is not None:
            queries, keys = project(table)  # [h, 2S, d], [h_kv, 2S, d]
            keys = keys.repeat_interleave(self.n_heads // keys.shape[0], dim=0)  # [h, 2S, d]
        elif self.share_att_key:  # no layer: the table itself, split into heads
            queries = keys = table.view(2 * self.span, self.n_heads, self.d_head).transpose(0, 1)
        else:
            if "c2p" in self.terms:
                keys = self._heads(self.pos_key_proj(table))
            if "p2c" in self.terms:
                queries = self._heads(self.pos_query_proj(table))
        return (
            queries if "p2c" in self.terms else None,
            keys if "c2p" in self.terms else None,
        )

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d_model]`` -> ``[h, n, d]``."""
        return x.view(x.shape[0], self.n_heads, self.d_head).transpose(0, 1)

    def score_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """The terms ``[b, h, i, j]`` that make attention's q·kᵀ/√d DeBERTa's score:
        (1/√f − 1)·q·kᵀ/√d + (q_i·K_r[δ(i, j)] + k_j·Q_r[δ(i, j)]) / √(d·f).

        q ``[b, h, i, d]``, k ``[b, h_kv, j, d]``; positions ``[i]`` / ``[b, i]`` and ``[j]`` / ``[b, j]``.

        Raises:
            ValueError: heads or width that are not the encoding's, positions whose shape does not match q
                or k (:func:`~posenc.encodings.base.query_key_positions`) or that do not fit
                (:meth:`relative_index`).
        """
        b, h, _, d = q.shape
        h_kv = k.shape[1]
        if h != self.n_heads or d != self.d_head or h % h_kv:
            raise ValueError(
                f"DeBERTa's terms take q [b, n_heads={self.n_heads}, i, d_head={self.d_head}] and k with a "
                f"divisor of n_heads as heads, got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        index = self.relative_index(*query_key_positions(q, k, q_positions, k_positions))  # [(b,) i, j]
        index = index.unsqueeze(-3) if index.dim() == 3 else index  # [(b, 1,) i, j]
        pos_query, pos_key = self.position_heads(project)  # [h, 2S, d] each, or None
        scale = math.sqrt(d * self.scale_factor)
        terms = _grouped_scores(q, k) * ((1 / math.sqrt(self.scale_factor) - 1) / math.sqrt(d))
        if pos_key is not None:
            terms = terms + content_to_position(q, pos_key.to(q.dtype), index) / scale
        if pos_query is not None:
            terms = terms + position_to_content(k, pos_query.to(k.dtype), index, h) / scale
        return terms

    def block_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
        content: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> BlockTerms:
        """:meth:`score_terms` for one block of queries at a time (``posenc.kernels.query_blocked``): each
        block forms its queries' q·K_rᵀ, its keys' k·Q_rᵀ and the content correction, and gathers its
        pairs' rows δ(i, j)."""
        b, h, _, d = q.shape
        h_kv = k.shape[1]
        if h != self.n_heads or d != self.d_head or h % h_kv:
            raise ValueError(
                f"DeBERTa's terms take q [b, n_heads={self.n_heads}, i, d_head={self.d_head}] and k with a "
                f"divisor of n_heads as heads, got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        q_positions, k_positions = query_key_positions(q, k, q_positions, k_positions)
        pos_query, pos_key = self.position_heads(project)  # [h, 2S, d] each, or None
        scale = 1 / math.sqrt(d * self.scale_factor)
        content = (1 / math.sqrt(self.scale_factor) - 1) / math.sqrt(d)
        tensors = []
        if pos_key is not None:
            tensors.append(pos_key.to(q.dtype))
        if pos_query is not None:  # k_j·Q_r[r] for every row r, through p2c's own gather: [b, h, 2S, j]
            every_row = torch.arange(2 * self.span, device=k.device)[:, None].expand(-1, k.shape[2])
            tensors.append(position_to_content(k, pos_query.to(k.dtype), every_row, h))
        index_of = self._block_index(q_positions, k_positions)

        def block(q_rows, k_keys, rows, keys, *tensors):
            index = index_of(rows, keys)  # [(b, 1,) n, m]
            terms = _grouped_scores(q_rows, k_keys) * content
            if pos_key is not None:
                terms = terms + content_to_position(q_rows, tensors[0], index) * scale
            if pos_query is not None:
                by_row = tensors[-1][..., keys.start : keys.stop]  # [b, h, 2S, m]
                terms = terms + by_row.gather(2, index.expand(*by_row.shape[:2], *index.shape[-2:])) * scale
            return terms

        return BlockTerms(block, tuple(tensors))

    def _block_index(self, q_positions: torch.Tensor, k_positions: torch.Tensor):
        """``(rows, keys) -> δ`` ``[(b, 1,) n, m]`` of a block's pairs: for positions ``[i]``, ``[j]`` read from
        δ of every distance present (one [D] table, D = the span of the distances); batched, per block."""
        if q_positions.dim() != 1 or k_positions.dim() != 1:

            def per_block(rows: slice, keys: slice) -> torch.Tensor:
                index = self.relative_index(q_positions[..., rows], k_positions[..., keys])
                return index.unsqueeze(-3)

            return per_block
        low = int(q_positions.min() - k_positions.max())
        high = int(q_positions.max() - k_positions.min())
        distances = torch.arange(low, high + 1, device=q_positions.device)
        table = self.relative_index(distances, distances.new_zeros(1))[:, 0]  # δ at distance low + t: [D]

        def from_table(rows: slice, keys: slice) -> torch.Tensor:
            distance = q_positions[rows, None] - k_positions[None, keys]  # [n, m]
            return table[distance - low]

        return from_table

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, position_buckets={self.position_buckets}, "
            f"max_relative_positions={self.max_relative_positions}, share_att_key={self.share_att_key}, "
            f"terms={self.terms}, layer_norm={self.layer_norm}"
        )


#: What posenc says about :class:`DisentangledAttention` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="DeBERTa",
    where_it_acts="reads q and k: content-to-position and position-to-content terms, log buckets",
    used_by="DeBERTa v1–v3",
    parameter_formula="2S·d + 2d (S = position_buckets, 256 by default; the LayerNorm's 2d with layer_norm), "
    "+ d² + d per position term without share_att_key; independent of L",
    specimen_kwargs={
        "d_model": 64,
        "n_heads": 8,
        "position_buckets": 32,
        "max_relative_positions": 128,
        "share_att_key": False,
        "layer_norm": False,
    },
    figures={
        "logit-shift": "Exactly 0 at every shift: both position terms read the relative embeddings at the "
        "bucket of p_i − p_j only, so shifting every position leaves the logits as they are.",
    },
)


def _check_terms(terms: Iterable[str]) -> tuple[str, ...]:
    if isinstance(terms, str) or not isinstance(terms, Iterable):
        raise TypeError(f"terms must be a sequence of {' and '.join(map(repr, TERMS))}, got {terms!r}")
    terms = tuple(terms)
    unknown = [term for term in terms if term not in TERMS]
    if unknown or not terms or len(set(terms)) != len(terms):
        raise ValueError(
            f"terms must be one or both of {', '.join(map(repr, TERMS))}, each once; got {terms!r}"
        )
    return tuple(term for term in TERMS if term in terms)


def _grouped_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q·kᵀ ``[b, h, i, j]`` for q ``[b, h, i, d]`` and k ``[b, h_kv, j, d]`` (query heads in groups of
    h / h_kv per key head, as attention repeats them), without repeating k."""
    b, h, i, d = q.shape
    h_kv = k.shape[1]
    grouped = q.reshape(b, h_kv, (h // h_kv) * i, d)  # [b, h_kv, g·i, d]
    return (grouped @ k.transpose(-1, -2)).view(b, h, i, k.shape[2])  # [b, h, i, j]


def content_to_position(q: torch.Tensor, pos_key: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """c2p: q_i·K_r[δ(i, j)] ``[b, h, i, j]`` from q ``[b, h, i, d]``, K_r ``[h, 2S, d]`` and δ ``[(b, 1,) i, j]``:
    one product per relative embedding, ``[b, h, i, 2S]``, then a gather."""
    by_distance = q @ pos_key.transpose(-1, -2)  # [b, h, i, 2S]
    b, h, i, _ = by_distance.shape
    return by_distance.gather(-1, index.expand(b, h, i, index.shape[-1]))  # [b, h, i, j]


def position_to_content(
    k: torch.Tensor, pos_query: torch.Tensor, index: torch.Tensor, n_heads: int
) -> torch.Tensor:
    """p2c: k_j·Q_r[δ(i, j)] ``[b, h, i, j]`` from k ``[b, h_kv, j, d]``, Q_r ``[h, 2S, d]`` and δ
    ``[(b, 1,) i, j]``: one product per relative embedding, ``[b, h_kv, j, g·2S]``, then a gather."""
    b, h_kv, j, d = k.shape
    groups, rows = n_heads // h_kv, pos_query.shape[1]
    grouped = pos_query.reshape(h_kv, groups * rows, d)  # [h_kv, g·2S, d]
    by_distance = (k @ grouped.transpose(-1, -2)).view(b, h_kv, j, groups, rows)  # [b, h_kv, j, g, 2S]
    by_distance = by_distance.permute(0, 1, 3, 4, 2)  # [b, h_kv, g, 2S, j]
    i = index.shape[-2]
    index = index.unsqueeze(-3).expand(b, h_kv, groups, i, j)  # [b, h_kv, g, i, j]
    return by_distance.gather(3, index).view(b, n_heads, i, j)  # [b, h, i, j]


__all__ = [
    "TERMS",
    "DisentangledAttention",
    "check_buckets",
    "content_to_position",
    "deberta_log_bucket",
    "position_to_content",
]
