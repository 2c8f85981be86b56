"""Multi-head attention that takes any positional encoding through one interface.

Every encoding is asked the same questions on every call: ``rotate`` q and k (RoPE), ``bias`` the
scores (ALiBi, T5, Swin) or, for the flex backend, ``score_mod``, ``score_terms`` that read q and
k (with the layer's projections at hand, ``project_heads``), and, for an encoding that
``reads_attention_weights`` (Shaw's relative values), ``value_terms`` added to the output: those
weights exist only on the eager path, which then serves every backend. Additive encodings act on the
embeddings before attention and answer with identities here. The base class derives a score_mod from
a bias and a bias from a score_mod, so every backend serves every encoding; a bias of the distance
alone (``distance_bias``) takes a faster path on CPU.

Backends, all computing softmax(q·kᵀ·scale + bias + terms + mask)·v, where scale is the encoding's
``logit_scale(d_head)`` (1/√d unless the encoding says otherwise: RoPE with DeepSeek's YaRN):

- ``"eager"``: explicit scores and softmax in the inputs' dtype (half types in float32); the reference.
- ``"sdpa"``: ``scaled_dot_product_attention``. Nothing added to the scores (NoPE, RoPE, additive
  encodings): ``is_causal`` where queries and keys are the same tokens (the kernel skips the hidden
  keys), no mask for one query or bidirectional attention, a bool mask only for several queries after
  a KV cache, one call per packed document. A bias of the distance alone at consecutive positions on
  CPU: one per-distance table (``posenc.kernels.per_distance``). Any other bias: a float ``attn_mask``
  ``[(b,) h, i, j]``, on CPU for causal or learned biases in query blocks with a backward of its own
  (``posenc.kernels.blocked``). An encoding that gives its terms per block of queries
  (``block_terms``: Shaw, Transformer-XL, DeBERTa, FIRE, CoPE) runs on CPU a block at a time,
  never holding them for every pair (``posenc.kernels.query_blocked``), past one block of queries.
- ``"flex"``: compiled ``flex_attention`` with the encoding's ``score_mod`` and a causal block mask,
  so no s×s tensor is built. On CPU, torch 2.13's compiled flex_attention returns wrong values or NaN
  at some lengths and head widths, intermittently, and has no backward; there the same score_mod is
  evaluated on broadcast index grids, a block of queries at a time (exact, with autograd). The
  pure-torch check ``tools/flex_cpu_check.py`` shows when a torch release no longer needs this.
  With no score_mod and no terms there is nothing for flex to add: SDPA as above.

A layer may also keep a sliding ``window`` or ``chunk`` of keys (:mod:`posenc.masks`: masks of
indices, combined with causality and packed documents, the flex backend's block mask on CUDA), learned
``sinks`` (:mod:`posenc.sinks`: a logit per head in the softmax's denominator) and a query
``temperature`` (:mod:`posenc.temperature`: q times f(position), after the rotation), a QK-norm
(:mod:`posenc.qk_norm`), Gemma's ``query_pre_attn_scalar`` and a ``softcap`` of the logits (eager and
flex: :mod:`posenc.logits`). On sdpa, with
nothing added to the scores, a window runs in blocks of queries against two blocks of keys and chunks
as batch rows of one causal call; sinks rescale SDPA's output by σ(lse − sink) (CPU's flash kernel,
elsewhere the explicit softmax); with a bias, one masked call.

Notation used for tensor shapes: b batch, s sequence, h heads, h_kv key/value heads, d head width,
i / j query / key positions.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from posenc import logits
from posenc._validation import check_bool, check_positive_int
from posenc.backends import ATTENTION, check_backend
from posenc.encodings import PositionalEncoding, build
from posenc.encodings.base import query_key_positions
from posenc.encodings.views import view
from posenc.kernels.blocked import biased_attention, differentiable
from posenc.kernels.per_distance import per_distance_attention
from posenc.kernels.query_blocked import query_blocked_attention, worth_blocking
from posenc.kernels.widths import one_width_sdpa
from posenc.kv_cache import KVCache
from posenc.masks import attention_mask, causal_sdpa, check_span, chunked_sdpa, visible, windowed_sdpa
from posenc.packing import continued_positions, document_ids, document_segments
from posenc.qk_norm import QKNorm, check_qk_norm
from posenc.sinks import check_sinks, sink_attention, sink_weights
from posenc.temperature import QueryTemperature, check_temperature, tempered

BACKENDS = ATTENTION  # the attention backends of posenc.backends' one vocabulary
#: Scores the flex reference path holds at once (a block of queries against every key): 64 MiB in float32.
REFERENCE_BLOCK_SCORES = 1 << 24


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=64)
def _causal_block_mask(
    q_len: int,
    k_len: int,
    device: str,
    causal: bool = True,
    window: int | None = None,
    chunk: int | None = None,
):
    from torch.nn.attention.flex_attention import create_block_mask

    offset = k_len - q_len  # queries are the last q_len of the keys' sequence

    def mask_mod(b, h, q_idx, kv_idx):  # posenc.masks.visible: causality, the window, the chunk
        return visible(q_idx + offset, kv_idx, causal=causal, window=window, chunk=chunk)

    return create_block_mask(mask_mod, None, None, q_len, k_len, device=device)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (optionally grouped-query) with a positional encoding's hooks.

    Args:
        d_model: model width.
        n_heads: query heads; d_head = d_model / n_heads.
        n_kv_heads: key/value heads for grouped-query attention (default n_heads); divides n_heads.
        encoding: a ``PositionalEncoding`` (shared with other layers if the caller passes the same
            instance) or None for none.
        backend: ``"eager" | "sdpa" | "flex"``.
        causal: mask keys after each query (decoders); False for encoders.
        bias: biases on the q, k, v and output projections (BERT, DeBERTa); none by default (LLaMA).
        window: sliding window in tokens (transformers' ``sliding_window``): query t sees keys
            t − window < u ≤ t (bidirectional: |t − u| < window); None: every key (:mod:`posenc.masks`).
        chunk: chunked attention in tokens (Llama 4's ``attention_chunk_size``): query t sees the keys
            of its own chunk, ⌊t / chunk⌋ = ⌊u / chunk⌋; None: no chunks.
        sinks: learned sink logits, one per head, in the softmax's denominator (GPT-OSS's ``sinks``,
            :mod:`posenc.sinks`): True (zeros), or the initial logits ``[n_heads]``; False: none.
        temperature: a :class:`posenc.temperature.QueryTemperature` multiplying each query by f(its
            position) after the encoding has rotated it (Llama 4, Ministral 3, SSMax); None: none.
        qk_norm: a :class:`posenc.qk_norm.QKNorm`, an RMSNorm of every query and key head (Gemma 3,
            Qwen 3: before the rotation; Llama 4: after it), its gains ``q_norm`` and ``k_norm``; None: none.
        query_pre_attn_scalar: logits q·kᵀ·n^(−½) for this n instead of d_head (Gemma 2 and 3,
            :mod:`posenc.logits`); None: d_head.
        softcap: logits c·tanh(z / c) before the mask (Gemma 2's ``attn_logit_softcapping``); eager and
            flex only; None: none.

    Raises:
        ValueError: a window or chunk ≤ 0, sinks of another head count, a temperature on an encoding that
            does not accept one (``accepts_query_temperature``) or on coordinates of several axes, a
            query_pre_attn_scalar or softcap that is not finite and > 0, a softcap on ``sdpa``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        encoding: PositionalEncoding | None = None,
        backend: str = "sdpa",
        causal: bool = True,
        bias: bool = False,
        window: int | None = None,
        chunk: int | None = None,
        sinks: bool | torch.Tensor = False,
        temperature: QueryTemperature | None = None,
        qk_norm: QKNorm | None = None,
        query_pre_attn_scalar: float | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.n_heads = check_positive_int("n_heads", n_heads)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else check_positive_int("n_kv_heads", n_kv_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={n_heads}")
        self.d_head = d_model // n_heads
        self.backend = check_backend("attention", backend)
        self.causal = bool(causal)
        self.encoding = build("nope") if encoding is None else encoding
        _check_encoding(self.encoding, self.n_heads)
        bias = check_bool("bias", bias)
        self.q_proj = nn.Linear(d_model, self.n_heads * self.d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(self.n_heads * self.d_head, d_model, bias=bias)
        self.window = check_span("window", window)
        self.chunk = check_span("chunk", chunk)
        initial = check_sinks(sinks, self.n_heads)
        self.sinks = None if initial is None else nn.Parameter(initial)  # [h], GPT-OSS's name and shape
        self.temperature = _check_temperature(check_temperature(temperature), self.encoding)
        self.qk_norm = check_qk_norm(qk_norm)
        if qk_norm is not None:  # transformers' names: q_norm, k_norm
            qk_norm.check_place(
                type(self.encoding).__name__, self.encoding.capabilities.rotated_keys_are_cacheable
            )
            self.q_norm, self.k_norm = qk_norm.build(self.d_head), qk_norm.build(self.d_head)
        self.query_pre_attn_scalar = logits.check_query_pre_attn_scalar(query_pre_attn_scalar)
        self.softcap = logits.check_softcap(softcap)
        logits.check_softcap_backend(self.softcap, self.backend)
        if not self.encoding.capabilities.follows_documents:
            for name, value in (("window", self.window), ("chunk", self.chunk), ("sinks", self.sinks)):
                if value is not None:
                    raise ValueError(
                        f"{name}={window if name == 'window' else chunk if name == 'chunk' else sinks!r}: "
                        f"{type(self.encoding).__name__}'s weights read keys a query does not see and are no "
                        "softmax over those it sees (follows_documents is False), so a layer cannot mask its keys "
                        "or add sinks to its softmax"
                    )

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x ``[b, s, d_model]`` -> ``[b, s, d_model]``.

        positions: ``[s]`` or ``[b, s]``; default continues the cache (``cache.length + arange(s)``).
        cache: a ``KVCache`` to read earlier keys from and append this call's keys to.
        documents: ``[s]`` or ``[b, s]`` document ids of packed sequences (:func:`document_ids`): a token
            attends only to tokens of its own document; give each document its own positions.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape [b, s, d_model={self.d_model}], got {tuple(x.shape)}")
        self.check_cache(cache)
        positions = continued_positions(positions, x, cache, self.encoding.position_space.columns)
        return self.forward_at(x, positions, cache, document_ids(documents, x, cache))

    def check_cache(self, cache: KVCache | None) -> None:
        """Refuse a cache this layer cannot decode with: bidirectional attention (a token's output would
        depend on keys that arrive later), or a cache that holds another layer's keys."""
        if cache is None:
            return
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
        if not self.causal:
            raise ValueError(
                "a KV cache needs causal attention: with causal=False each token attends to tokens that "
                "arrive in later calls, which incremental decoding cannot give; run the whole sequence at once"
            )
        if cache.positions_move:  # keys take their places in the cache (StreamingLLM), not in the text
            if self.window is not None and cache.window < self.window:
                raise ValueError(
                    f"a cache keeping a window of {cache.window} tokens drops keys this layer's window={self.window} "
                    f"still sees: give it window ≥ {self.window} (or no window)"
                )
            for name, value in (("chunk", self.chunk), ("temperature", self.temperature)):
                if value is not None:
                    raise ValueError(
                        f"{name}={value!r} reads each token's place in the text, which a cache keeping sinks and "
                        "a window moves: decode this layer with a cache that keeps every key (no window)"
                    )
        cache.claim(self, "attention layer")

    def forward_at(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`forward` at positions already resolved (``[s]`` or ``[b, s]`` int64 on x's device, or
        coordinates ``[s, n]`` / ``[b, s, n]``) and documents already checked, as a model resolves them
        once for all its layers."""
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.d_head).transpose(1, 2)  # [b, h, s, d]
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.d_head).transpose(1, 2)  # [b, h_kv, s, d]
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.d_head).transpose(1, 2)  # [b, h_kv, s, d]
        content = self.encoding.content(x)  # [b, s, c] or None: what the encoding reads of each token
        k_content = content
        q, k = self._normed(q, k, after_rotation=False)
        if cache is None:
            q, k = self._normed(*self.encoding.rotate(q, k, positions, positions), after_rotation=True)
            k_positions = positions
        elif self.encoding.capabilities.rotated_keys_are_cacheable and not cache.positions_move:
            q, k = self._normed(*self.encoding.rotate(q, k, positions, positions), after_rotation=True)
            cache.append(_joined(k, content), v, positions, self.encoding.position_space.columns)
            k, v, k_positions = cache.keys, cache.values, cache.positions  # [b, h_kv, t, d], [t] / [b, t]
            k, k_content = _parted(k, self.d_head, content)
        else:  # the cache holds unrotated keys (xPos; a sink cache's moving positions): all rotated now
            cache.append(_joined(k, content), v, positions, self.encoding.position_space.columns)
            k, v, k_positions = cache.keys, cache.values, cache.positions
            k, k_content = _parted(k, self.d_head, content)
            q, k = self._normed(*self.encoding.rotate(q, k, positions, k_positions), after_rotation=True)
        out = self._attend_at(
            q, k, v, positions, k_positions, documents, (content, k_content)
        )  # [b, h, s, d]
        out = _plus(out, self.encoding.output_terms(q, k, v, positions, k_positions))
        return self.out_proj(out.transpose(1, 2).reshape(b, s, self.n_heads * self.d_head))

    def _normed(self, q, k, *, after_rotation: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k through the layer's QK-norm where it sits at this place (before or after the rotation)."""
        if self.qk_norm is None or self.qk_norm.after_rotation != after_rotation:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_positions: torch.Tensor | None,
        k_positions: torch.Tensor | None,
    ) -> torch.Tensor:
        """softmax(q·kᵀ·scale + bias + terms + mask)·v for q ``[b, h, i, d]``, k, v ``[b, h_kv, j, d]``;
        scale is the encoding's ``logit_scale(d_head)``, 1/√d by default.

        The bias is the encoding's ``bias`` (or, on flex, its ``score_mod``); the terms its
        ``score_terms``, which read q and k. Every backend serves every encoding.

        q_positions ``[i]`` / ``[b, i]`` and k_positions ``[j]`` / ``[b, j]`` (``[i, n]`` / ``[b, i, n]`` …
        for an encoding of n axes); None: keys 0 … j − 1, queries the last i of them.

        Raises:
            ValueError: q, k, v whose batch, heads or width do not fit the layer or each other, fewer keys
                than causal queries (their rows would have no key), positions whose shape does not
                match q or k (a bias of other positions would broadcast over the queries).
        """
        self._check_qkv(q, k, v)
        q_positions, k_positions = query_key_positions(
            q, k, q_positions, k_positions, columns=self.encoding.position_space.columns
        )  # [(b,) i(, n)], [(b,) j(, n)]
        out = self._attend_at(q, k, v, q_positions, k_positions)
        return _plus(out, self.encoding.output_terms(q, k, v, q_positions, k_positions))

    def _check_qkv(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """q ``[b, n_heads, i, d_head]``, k and v ``[b, n_kv_heads, j, d_head]``, and j ≥ i when causal."""
        for name, tensor, heads in (
            ("q", q, self.n_heads),
            ("k", k, self.n_kv_heads),
            ("v", v, self.n_kv_heads),
        ):
            if tensor.dim() != 4 or tensor.shape[1] != heads or tensor.shape[3] != self.d_head:
                raise ValueError(
                    f"{name} must have shape [b, {heads}, s, {self.d_head}] for this layer's heads and width, "
                    f"got {tuple(tensor.shape)}"
                )
        if not q.shape[0] == k.shape[0] == v.shape[0] or k.shape[2] != v.shape[2]:
            raise ValueError(
                f"q, k and v must share the batch, and k and v the keys: got {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(v.shape)}"
            )
        if self.causal and k.shape[2] < q.shape[2]:
            raise ValueError(
                f"causal attention takes the queries as the last of the keys: {q.shape[2]} queries need at "
                f"least as many keys, got {k.shape[2]}"
            )

    def _attend_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        documents: torch.Tensor | None = None,
        content: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    ) -> torch.Tensor:
        """:meth:`attend` at positions already resolved and checked against q and k (as :meth:`forward_at`
        has them: once per model call, not again in every layer); ``documents`` ``[s]`` / ``[b, s]``
        keeps each token to the keys of its own document (queries and keys the same tokens); ``content``:
        what the encoding read of the queries' and the keys' layer input (``[b, i, c]``, ``[b, j, c]``)."""
        if documents is not None and not self.encoding.capabilities.follows_documents:
            raise ValueError(
                f"{type(self.encoding).__name__} reads keys outside a packed document's own (its weights are "
                "no softmax over the keys a query sees): give each document a call of its own, not documents"
            )
        if self.encoding.capabilities.reads_content and content[1] is None:
            raise ValueError(
                f"{type(self.encoding).__name__} reads each token's layer input (its content), which q, k "
                "and v alone do not carry: call the layer on x (forward), not attend"
            )
        if self.temperature is not None:  # q × f(position), after the encoding's rotation
            q = tempered(q, q_positions, self.temperature)
        if self.query_pre_attn_scalar is not None:  # q·kᵀ·n^(−½) in place of d_head^(−½)
            q = q * logits.query_factor(self.d_head, self.query_pre_attn_scalar)
        logits.check_softcap_backend(self.softcap, self.backend)  # the backend may be set after __init__
        if self.window is not None or self.chunk is not None or self.sinks is not None:
            return self._attend_masked(q, k, v, q_positions, k_positions, documents, content)
        if (
            self.backend == "sdpa"
            and documents is None
            and q.device.type == "cpu"
            and not torch.compiler.is_compiling()
            and worth_blocking(q.shape[2])
        ):
            blocked = self.encoding.block_terms(
                q, k, q_positions, k_positions, project=self.project_heads, content=_given(content)
            )
            if blocked is not None:  # terms a block of queries at a time (posenc.kernels.query_blocked)
                return query_blocked_attention(q, k, v, blocked, causal=self.causal, scale=self._scale())
        terms = self.encoding.score_terms(
            q, k, q_positions, k_positions, project=self.project_heads
        )  # [b, h, i, j] or None
        if content[1] is not None:  # terms read from the tokens' content (FoX, PaTH)
            terms = _sum(terms, self.encoding.content_terms(q, k, *content))
        # the weights themselves are needed: eager, any backend
        if self.encoding.capabilities.reads_attention_weights:
            bias = _sum(self.encoding.bias(q_positions, k_positions), terms)
            mask = self._mask(q.shape[2], k.shape[2], q.device, documents)
            return self._eager(q, k, v, bias, mask, q_positions, k_positions)
        if self.backend == "flex":
            score_mod = self.encoding.score_mod(q_positions=q_positions, k_positions=k_positions)
            if score_mod is None and terms is None and self.softcap is None:  # nothing to add: SDPA's kernels
                return self._unbiased(q, k, v, documents)
            return self._flex(q, k, v, score_mod, terms, documents)
        if (
            self.backend == "sdpa"
            and terms is None
            and documents is None
            and self._per_distance(q, k, q_positions, k_positions)
        ):
            # A bias of i − j alone, at consecutive positions: SDPA reads it as a strided view of one
            # per-distance table (posenc.kernels.per_distance), with no [h, i, j] tensor.
            return per_distance_attention(
                q,
                k,
                v,
                functools.partial(view, self.encoding, "distance_bias"),
                causal=self.causal,
                scale=self._scale(),
            )
        bias = _sum(self.encoding.bias(q_positions, k_positions), terms)  # [(b,) h, i, j] or None
        if self.backend == "eager":
            return self._eager(q, k, v, bias, self._mask(q.shape[2], k.shape[2], q.device, documents))
        if bias is None:
            return self._unbiased(q, k, v, documents)
        attn_mask = _float_mask(bias, self._mask(q.shape[2], k.shape[2], q.device, documents), q.dtype)
        if (
            attn_mask.dim() == 3
        ):  # SDPA's flash kernel takes 2-d or 4-d masks: a 3-d one meant its math backend
            attn_mask = attn_mask.unsqueeze(0)  # [1, h, i, j]
        if (
            q.device.type == "cpu"
            and not torch.compiler.is_compiling()
            and (self.causal or differentiable(attn_mask))
        ):
            # Flash calls of query blocks that skip the keys after them, and for a learned bias (or terms)
            # a backward that gives it its gradient instead of SDPA's math backend (posenc.kernels.blocked)
            return biased_attention(q, k, v, attn_mask, causal=self.causal, scale=self._scale())
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, scale=self._scale(), enable_gqa=self.n_kv_heads != self.n_heads
        )

    def _attend_masked(self, q, k, v, q_positions, k_positions, documents, content) -> torch.Tensor:
        """:meth:`_attend_at` for a layer with a window, chunks or sinks, on every backend: the eager
        reference; flex with the mask as its block mask; SDPA blocked by the window or chunk where nothing
        is added to the scores (:func:`posenc.masks.windowed_sdpa`, :func:`posenc.masks.chunked_sdpa`),
        else one masked call; sinks through :func:`posenc.sinks.sink_attention`."""
        terms = self.encoding.score_terms(q, k, q_positions, k_positions, project=self.project_heads)
        if content[1] is not None:  # terms read from the tokens' content
            terms = _sum(terms, self.encoding.content_terms(q, k, *content))
        mask = self._mask(q.shape[2], k.shape[2], q.device, documents)  # bool or None
        if self.encoding.capabilities.reads_attention_weights:
            bias = _sum(self.encoding.bias(q_positions, k_positions), terms)
            return self._eager(q, k, v, bias, mask, q_positions, k_positions)
        if self.backend == "flex":
            score_mod = self.encoding.score_mod(q_positions=q_positions, k_positions=k_positions)
            if score_mod is not None or terms is not None or self.softcap is not None:
                return self._flex(q, k, v, score_mod, terms, documents)
            bias = None
        else:
            bias = _sum(self.encoding.bias(q_positions, k_positions), terms)  # [(b,) h, i, j] or None
            if self.backend == "eager":
                return self._eager(q, k, v, bias, mask)
        scale = self._scale()
        gqa = self.n_kv_heads != self.n_heads
        same_tokens = documents is None and q.shape[2] == k.shape[2] and self.causal
        if bias is None and same_tokens and self.chunk is None and self.window is not None:
            return windowed_sdpa(q, k, v, self.window, scale=scale, sinks=self.sinks)
        if bias is None and same_tokens and self.chunk is not None and self.window is None:
            return chunked_sdpa(q, k, v, self.chunk, scale=scale, sinks=self.sinks)
        if bias is None and same_tokens and self.chunk is None and self.window is None:  # sinks alone
            return causal_sdpa(q, k, v, scale=scale, sinks=self.sinks)
        attn_mask = _float_mask(bias, mask, q.dtype) if bias is not None else mask
        if attn_mask is not None and attn_mask.dim() == 3:  # a bias [h, i, j]: as [1, h, i, j]
            attn_mask = attn_mask.unsqueeze(0)
        if self.sinks is not None:
            groups = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [b, h, j, d]
            return sink_attention(q, k, v, self.sinks, scale=scale, attn_mask=attn_mask)
        if bias is not None and q.device.type == "cpu" and not torch.compiler.is_compiling():
            return biased_attention(q, k, v, attn_mask, causal=self.causal, scale=scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=gqa)

    def _unbiased(self, q, k, v, documents: torch.Tensor | None) -> torch.Tensor:
        """softmax(q·kᵀ·scale + mask)·v with nothing added to the scores, ``[b, h, i, d]``: SDPA's causal
        kernel (``is_causal``, which skips the hidden keys) where queries and keys are the same tokens, no
        mask for one query or bidirectional attention, a bool mask only for several queries after a KV
        cache (``is_causal`` would align them with the first keys); packed documents one at a time."""
        q_len, k_len = q.shape[2], k.shape[2]
        gqa = self.n_kv_heads != self.n_heads
        if documents is not None:
            segments = None if torch.compiler.is_compiling() else document_segments(documents)
            if segments is not None:
                return self._per_document(q, k, v, segments)
            mask = self._mask(q_len, k_len, q.device, documents)  # bool [(b, 1,) i, j]
            return one_width_sdpa(q, k, v, attn_mask=mask, scale=self._scale(), enable_gqa=gqa)
        causal = self.causal and q_len > 1  # one query (decoding) sees every key
        mask = self._mask(q_len, k_len, q.device) if causal and q_len != k_len else None  # bool [i, j]
        return one_width_sdpa(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=self._scale(), enable_gqa=gqa
        )

    def _per_document(self, q, k, v, segments: list[tuple[slice, int, int]]) -> torch.Tensor:
        """Each document's tokens against each other, one SDPA call per document (causal: ``is_causal``),
        so a packed row costs what its documents cost alone; segments as :func:`posenc.packing.document_segments`."""
        gqa = self.n_kv_heads != self.n_heads
        rows: dict[tuple[int | None, int | None], list[torch.Tensor]] = {}
        for batch, start, end in segments:
            rows.setdefault((batch.start, batch.stop), []).append(
                one_width_sdpa(
                    q[batch, :, start:end],
                    k[batch, :, start:end],
                    v[batch, :, start:end],
                    is_causal=self.causal and end - start > 1,
                    scale=self._scale(),
                    enable_gqa=gqa,
                )  # [b or 1, h, end − start, d]
            )
        outputs = [torch.cat(parts, dim=2) if len(parts) > 1 else parts[0] for parts in rows.values()]
        return torch.cat(outputs, dim=0) if len(outputs) > 1 else outputs[0]  # [b, h, s, d]

    def _scale(self) -> float:
        """The factor on q·kᵀ, the encoding's ``logit_scale`` (d_head^(−1/2) unless it says otherwise)."""
        return self.encoding.logit_scale(self.d_head)

    def _per_distance(self, q, k, q_positions, k_positions) -> bool:
        """Whether the per-distance CPU path applies: consecutive positions, a bias of the distance alone."""
        if q.device.type != "cpu" or torch.compiler.is_compiling():  # consecutive? is a host value
            return False
        if q_positions.dim() != 1 or k_positions.dim() != 1:
            return False
        k_len, q_len = k.shape[2], q.shape[2]
        consecutive = torch.equal(k_positions, torch.arange(k_len, device=k.device)) and torch.equal(
            q_positions, torch.arange(k_len - q_len, k_len, device=q.device)
        )
        return consecutive and "distance_bias" in self.encoding.views

    def _mask(
        self, q_len: int, k_len: int, device, documents: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Which keys each query sees (causality, the window, the chunk, documents: :mod:`posenc.masks`):
        ``[i, j]``, ``[(b, 1,) i, j]`` with documents, or None."""
        return attention_mask(
            q_len,
            k_len,
            device,
            causal=self.causal,
            window=self.window,
            chunk=self.chunk,
            documents=documents,
        )

    def _eager(self, q, k, v, bias, mask, q_positions=None, k_positions=None) -> torch.Tensor:
        groups = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [b, h, j, d]
        dtype = torch.promote_types(q.dtype, torch.float32)  # half types upcast; float64 stays float64
        scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * self._scale()  # [b, h, i, j]
        if bias is not None:
            scores = scores + bias.to(dtype)
        if self.softcap is not None:
            scores = logits.softcap(scores, self.softcap)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = (
            scores.softmax(dim=-1) if self.sinks is None else sink_weights(scores, self.sinks)
        )  # [b, h, i, j]
        out = weights @ v.to(dtype)  # [b, h, i, d]
        if self.encoding.capabilities.reads_attention_weights:
            out = out + self.encoding.value_terms(weights, q_positions, k_positions).to(dtype)
        return out.to(q.dtype)

    def project_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings ``[n, d_model]`` through this layer's query and key projections, as heads:
        ``([h, n, d_head], [h_kv, n, d_head])`` (what DeBERTa applies to its relative embeddings)."""
        n = x.shape[0]
        queries = self.q_proj(x).view(n, self.n_heads, self.d_head).transpose(0, 1)
        keys = self.k_proj(x).view(n, self.n_kv_heads, self.d_head).transpose(0, 1)
        return queries, keys

    def _flex(self, q, k, v, score_mod, terms, documents: torch.Tensor | None) -> torch.Tensor:
        if terms is not None:
            score_mod = _with_terms(score_mod, terms)
        if self.softcap is not None:
            score_mod = logits.capped_score_mod(score_mod, self.softcap)
        if (
            q.device.type == "cpu" or self.sinks is not None
        ):  # never the compiled CPU kernel: see the module docstring
            return self._score_mod_reference(
                q, k, v, score_mod, self._mask(q.shape[2], k.shape[2], q.device, documents)
            )
        if documents is not None:
            raise ValueError(
                "documents on the flex backend run on CPU (its reference path); on CUDA use backend='sdpa' "
                "or 'eager'"
            )
        masked = self.causal or self.window is not None or self.chunk is not None
        block_mask = (
            _causal_block_mask(q.shape[2], k.shape[2], q.device.type, self.causal, self.window, self.chunk)
            if masked
            else None
        )
        return _compiled_flex()(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=block_mask,
            scale=self._scale(),
            enable_gqa=self.n_kv_heads != self.n_heads,
        )

    def _score_mod_reference(self, q, k, v, score_mod, mask) -> torch.Tensor:
        """The score_mod evaluated on broadcast index grids: flex semantics, exact and with autograd.

        Queries go in blocks of at most :data:`REFERENCE_BLOCK_SCORES` scores, so the forward pass
        holds one block's ``[b, h, block, j]`` scores at a time.
        """
        b, h, i, j = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        groups = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [b, h, j, d]
        device = q.device
        b_idx = torch.arange(b, device=device).view(b, 1, 1, 1)
        h_idx = torch.arange(h, device=device).view(1, h, 1, 1)
        kv_idx = torch.arange(j, device=device).view(1, 1, 1, j)
        scale = self._scale()
        block = max(1, REFERENCE_BLOCK_SCORES // (b * h * j))
        outputs = []
        for start in range(0, i, block):
            rows = slice(start, min(start + block, i))
            scores = (q[:, :, rows] @ k.transpose(-1, -2)) * scale  # [b, h, block, j]
            if score_mod is not None:
                q_idx = torch.arange(rows.start, rows.stop, device=device).view(1, 1, -1, 1)
                scores = score_mod(scores, b_idx, h_idx, q_idx, kv_idx)
            if mask is not None:
                scores = scores.masked_fill(~mask[..., rows, :], float("-inf"))
            weights = scores.softmax(dim=-1) if self.sinks is None else sink_weights(scores, self.sinks)
            outputs.append(weights @ v)  # [b, h, block, d]
        return torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]


def _given(content: tuple[torch.Tensor | None, torch.Tensor | None]):
    """The queries' and keys' content ``([b, i, c], [b, j, c])`` where the encoding read one, else None."""
    return None if content[1] is None else content


def _sum(bias: torch.Tensor | None, terms: torch.Tensor | None) -> torch.Tensor | None:
    if bias is None or terms is None:
        return terms if bias is None else bias
    return bias + terms


def _joined(keys: torch.Tensor, content: torch.Tensor | None) -> torch.Tensor:
    """Keys ``[b, h_kv, s, d]`` with the content ``[b, s, c]`` of their tokens as c more channels of every
    head, ``[b, h_kv, s, d + c]``: what a KV cache keeps for an encoding that reads the content."""
    if content is None:
        return keys
    content = content.to(keys.dtype)[:, None].expand(-1, keys.shape[1], -1, -1)  # [b, h_kv, s, c]
    return torch.cat((keys, content), dim=-1)


def _parted(keys: torch.Tensor, width: int, content: torch.Tensor | None):
    """Cached keys ``[b, h_kv, t, d (+ c)]`` as (keys ``[b, h_kv, t, d]``, content ``[b, t, c]`` or None)."""
    if content is None:
        return keys, None
    return keys[..., :width], keys[:, 0, :, width:]


def _plus(out: torch.Tensor, terms: torch.Tensor | None) -> torch.Tensor:
    return out if terms is None else out + terms.to(out.dtype)


def _with_terms(score_mod, terms: torch.Tensor):
    """A score_mod adding ``terms[b, h, q_idx, kv_idx]`` to what ``score_mod`` (or nothing) gives."""

    def with_terms(score, b, h, q_idx, kv_idx):
        score = score if score_mod is None else score_mod(score, b, h, q_idx, kv_idx)
        return score + terms[b, h, q_idx, kv_idx].to(score.dtype)

    return with_terms


def _float_mask(
    bias: torch.Tensor | None, mask: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor | None:
    if mask is None:
        return None if bias is None else bias.to(dtype)
    blocked = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    return blocked if bias is None else bias.to(dtype) + blocked


def _check_temperature(temperature: QueryTemperature | None, encoding: PositionalEncoding):
    if temperature is None:
        return None
    if not encoding.capabilities.accepts_query_temperature:
        raise ValueError(
            f"temperature={temperature!r} multiplies the queries by a factor of their position, which "
            f"{type(encoding).__name__} does not accept (accepts_query_temperature is False: its scores "
            "are not linear in the query)"
        )
    if encoding.position_space.columns != 1:
        raise ValueError(
            f"temperature={temperature!r} reads one position per token; {type(encoding).__name__} takes "
            f"coordinates on {encoding.position_space.columns} axes"
        )
    return temperature


def _check_encoding(encoding: PositionalEncoding, n_heads: int) -> None:
    if not isinstance(encoding, PositionalEncoding):
        raise TypeError(f"encoding must be a PositionalEncoding, got {type(encoding).__name__}")
    heads = encoding.n_heads
    if encoding.capabilities.acts_in_attention and heads is not None and heads != n_heads:
        raise ValueError(f"the encoding's bias has {heads} heads but attention has n_heads={n_heads}")
