"""A small pre-LayerNorm transformer that takes any positional encoding: the model the lab trains.

``TransformerLM`` is decoder-only (causal); ``TransformerEncoder`` is bidirectional. Both take
``encoding=`` a registered name (built with arguments that fit the model) or an instance, so the
same model compares sinusoidal, learned, RoPE, ALiBi, T5 and NoPE with nothing else changed; or, per
layer, ``encoding=[...]`` one per layer and ``layers=`` a :mod:`posenc.stacks` spec (an encoding,
sliding window, chunk, sinks, query temperature, QK-norm, query scalar and logit cap per layer, or a
pattern of them).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from posenc._validation import check_bool, check_on_device, check_positive_float, check_positive_int
from posenc.attention import KVCache, MultiHeadAttention, continued_positions, document_ids
from posenc.encodings import PositionalEncoding, build, describe, encoding_class
from posenc.functional.randomized import randomized_positions
from posenc.stacks import LayerSpec, layer_specs


def default_encoding_arguments(name: str, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
    """Arguments that fit a model of this shape for the encoding registered as ``name`` (its own
    ``model_arguments``); unknown names get the registry's error, listing the valid ones."""
    return encoding_class(name).model_arguments(
        d_model=d_model, n_heads=n_heads, max_len=max_len, causal=causal
    )


def check_token_ids(tokens: torch.Tensor, vocab_size: int) -> None:
    """A ValueError naming the first token id outside 0 … vocab_size − 1 (or a TypeError for float ids);
    compiled, the same check on the device."""
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if torch.compiler.is_compiling():  # reading a value would be a host sync
        check_on_device((tokens >= 0) & (tokens < vocab_size), f"token ids must lie in 0 … {vocab_size - 1}")
        return
    outside = tokens[(tokens < 0) | (tokens >= vocab_size)]
    if outside.numel():
        raise ValueError(f"token id {int(outside[0])} is outside the vocabulary 0 … {vocab_size - 1}")


def _layer_encodings(
    encoding: PositionalEncoding, n_layers: int, share: bool, asked: bool | None = None
) -> list[PositionalEncoding]:
    """The encoding of each layer: the one instance for all, or (unshared, for an encoding that acts in
    attention) the instance in the first layer and a copy in each other, so every table is trained.
    An additive encoding acts once, on the embeddings, and is never copied. One that draws in each call
    (``capabilities.draws_per_call``: coordinate augmentation) is copied even where shared, so that every
    layer reads the same draw (:func:`_copied_for_draws`); ``asked``: the share the caller gave (None: the
    encoding's default)."""
    if not encoding.capabilities.acts_in_attention:
        return [encoding] * n_layers
    if share and not _copied_for_draws(encoding, asked):
        return [encoding] * n_layers
    return [encoding] + [copy.deepcopy(encoding) for _ in range(n_layers - 1)]


def _copied_for_draws(encoding: PositionalEncoding, asked: bool | None) -> bool:
    """Whether the layers get copies of an encoding that draws in each call (same generator state: one draw
    per forward for all layers, where one shared instance would draw again in each layer).

    Raises:
        ValueError: such an encoding with learned parameters, asked (``asked`` True) to share them.
    """
    if not encoding.capabilities.draws_per_call:
        return False
    if asked and any(p.requires_grad for p in encoding.parameters()):
        raise ValueError(
            f"{type(encoding).__name__} draws its coordinate augmentation in each call, so every layer takes a "
            "copy (one draw per forward for all layers); its learned parameters cannot then be shared: "
            "build the model with share_encoding=False, or augment the coordinates before the model"
        )
    return True


def _stack_encodings(
    specs: list[LayerSpec],
    base: PositionalEncoding | None,
    base_name: str | None,
    share: bool | None,
    arguments,
) -> list[PositionalEncoding]:
    """The encoding of each layer of a stack: a spec without one takes the model's (``base``, or, with
    arguments of its own, one built from ``base_name``); one instance per spec (a pattern's letter) where
    shared, else the first layer's instance and a copy in each later layer; ``arguments(name)`` gives
    the arguments the model's sizes give an encoding built by name."""
    built: dict[int, PositionalEncoding] = {}
    encodings = []
    for index, spec in enumerate(specs):
        if spec.encoding is None and not spec.encoding_kwargs:
            key, make = id(base), lambda: base
        else:
            key = id(spec)

            def make(spec=spec, index=index):
                if isinstance(spec.encoding, PositionalEncoding):
                    return spec.encoding
                name = spec.encoding if spec.encoding is not None else base_name
                if name is None:
                    raise ValueError(
                        f"layer {index} gives encoding arguments {sorted(spec.encoding_kwargs)} for the model's "
                        "encoding, which was given as an instance: name the encoding in the layer"
                    )
                return build(name, **(arguments(name) | dict(spec.encoding_kwargs)))

        if key not in built:
            built[key] = make()
            encoding = built[key]
        elif not built[key].capabilities.acts_in_attention or (
            _shared(built[key], share) and not _copied_for_draws(built[key], share)
        ):
            encoding = built[key]
        else:
            encoding = copy.deepcopy(built[key])
        if encoding is not base and encoding.kind == "additive":
            raise ValueError(
                f"layer {index}'s encoding {type(encoding).__name__} is added to the embeddings, once, before "
                "the first layer: give it as the model's encoding=, not per layer"
            )
        encodings.append(encoding)
    return encodings


def _shared(encoding: PositionalEncoding, share: bool | None) -> bool:
    """Whether the layers share ``encoding``: as told, else as its description says its models do."""
    return describe(encoding).shared_by_layers if share is None else share


class Block(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, attention: MultiHeadAttention) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = attention
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x ``[b, s, d]`` at resolved positions ``[s]`` or ``[b, s]`` (and checked document ids)."""
        x = x + self.attention.forward_at(self.attention_norm(x), positions, cache, documents)  # [b, s, d]
        return x + self.mlp(self.mlp_norm(x))


class TransformerLM(nn.Module):
    """Decoder-only language model with a pluggable positional encoding.

    Args:
        vocab_size: tokens.
        d_model, n_layers, n_heads, n_kv_heads, d_ff: the usual sizes (d_ff defaults to 4·d_model).
        encoding: a registered name or a ``PositionalEncoding``; or a list of one per layer (names or
            instances, none of them additive: an additive encoding acts once, on the embeddings).
        encoding_kwargs: overrides for the arguments built from the model's sizes.
        layers: what each attention layer takes (:mod:`posenc.stacks`): one ``layer(...)`` for every layer,
            a list of one per layer, or ``pattern("RRRN", R=layer("rope"), N=layer("nope"))`` repeated
            over the layers (its length must divide n_layers). A layer without an encoding of its own
            takes ``encoding``. None: every layer ``encoding``, attending to every earlier key.
        max_len: the longest sequence the model is built for: a learned table's size, T5's bucket range.
        share_encoding: one encoding for every layer (T5 shares its table); False gives each layer its own
            copy of an encoding that acts inside attention, the first layer holding ``self.encoding`` (an
            additive one acts once, on the embeddings, so it is never copied into layers where it would
            receive no gradient). None: as the encoding's description says its models do
            (``shared_by_layers``: True but for FoX's and PaTH's gates, which each layer learns).
        backend: attention backend, ``"eager" | "sdpa" | "flex"``.
        causal: True for a decoder.
        random_positions: randomized positions (Ruoss et al., 2023): a call without positions and without
            a KV cache puts each sequence at a sorted sample of distinct positions from
            0 … random_positions − 1 (:func:`posenc.functional.randomized_positions`, from torch's global
            generator), in training and in evaluation alike, as Ruoss et al. evaluate their models; positions
            given are used as given, and a KV cache continues its own. Every row is drawn for the full width
            s: for rows padded to different lengths pass ``randomized_positions(..., lengths=...)`` (as the
            lab trains). None: off.
        embedding_scale: token embeddings are multiplied by it before the encoding acts (Vaswani et al.,
            2017, scale them by √d_model so that they are not drowned by an added sinusoid); 1: unscaled.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int = 128,
        n_layers: int = 2,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        d_ff: int | None = None,
        encoding: str | PositionalEncoding | list = "rope",
        encoding_kwargs: dict | None = None,
        layers=None,
        max_len: int = 1024,
        share_encoding: bool | None = None,
        backend: str = "sdpa",
        causal: bool = True,
        random_positions: int | None = None,
        embedding_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.embedding_scale = check_positive_float("embedding_scale", embedding_scale)
        self.d_model = check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_positive_int("n_layers", n_layers)
        if d_model % check_positive_int("n_heads", n_heads):
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        share = None if share_encoding is None else check_bool("share_encoding", share_encoding)

        def arguments(name: str) -> dict:
            return default_encoding_arguments(
                name, d_model=d_model, n_heads=n_heads, max_len=max_len, causal=causal
            )

        specs = layer_specs(layers, n_layers)
        base_name = encoding if isinstance(encoding, str) else None
        if isinstance(encoding, list | tuple):
            if specs is not None:
                raise ValueError("give the encodings of the layers in encoding=[...] or in layers=, not both")
            if encoding_kwargs:
                raise ValueError("encoding_kwargs apply to one encoding given by name; per layer use layers=")
            specs = layer_specs(list(encoding), n_layers)
            encoding = None
        elif isinstance(encoding, str):
            encoding = build(encoding, **(arguments(encoding) | dict(encoding_kwargs or {})))
        elif encoding_kwargs:
            raise ValueError("encoding_kwargs apply to an encoding given by name, not to an instance")
        if specs is None:
            specs = [LayerSpec()] * n_layers
            layer_encodings = _layer_encodings(encoding, n_layers, _shared(encoding, share), share)
        else:
            layer_encodings = _stack_encodings(specs, encoding, base_name, share, arguments)
        self.encoding = layer_encodings[0] if encoding is None else encoding
        self.layer_specs = tuple(specs)
        _check_columns(self.encoding, layer_encodings)
        self.random_positions = self._check_random_positions(random_positions, layer_encodings)
        added = self.encoding.output_width(d_model) - d_model  # > 0 when the encoding concatenates
        if added >= d_model:
            raise ValueError(f"a concatenated encoding of width {added} leaves no room in d_model={d_model}")
        self.token_embedding = nn.Embedding(vocab_size, d_model - added)  # [V, d − added]
        d_ff = 4 * d_model if d_ff is None else check_positive_int("d_ff", d_ff)
        self.blocks = nn.ModuleList(
            Block(
                d_model,
                n_heads,
                d_ff,
                MultiHeadAttention(
                    d_model,
                    n_heads,
                    n_kv_heads=n_kv_heads,
                    encoding=layer_encoding,
                    backend=backend,
                    causal=causal,
                    **spec.attention_arguments(),
                ),
            )
            for layer_encoding, spec in zip(layer_encodings, specs, strict=True)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if added == 0:
            self.head.weight = self.token_embedding.weight  # tied

    @property
    def layer_encodings(self) -> list[PositionalEncoding]:
        """The encoding of each layer, in order (the same instance where layers share one)."""
        return [block.attention.encoding for block in self.blocks]

    def _check_random_positions(self, random_positions: int | None, encodings) -> int | None:
        if random_positions is None:
            return None
        random_positions = check_positive_int("random_positions", random_positions)
        if self.encoding.position_space.columns != 1:
            raise ValueError("random_positions draws positions on one axis; this encoding takes coordinates")
        limits = [
            e.position_space.limit for e in (self.encoding, *encodings) if e.position_space.limit is not None
        ]
        limit = min(limits) if limits else None
        if limit is not None and random_positions > limit:
            raise ValueError(
                f"random_positions={random_positions} reaches past the encoding's {limit} positions (its max_len)"
            )
        return random_positions

    def new_caches(
        self, capacity: int | None = None, *, sinks: int | None = None, window: int | str | None = None
    ) -> list[KVCache]:
        """One empty KV cache per layer, for incremental decoding (arguments: :class:`posenc.attention.KVCache`;
        its ``sinks`` are StreamingLLM's kept first tokens, not a layer's learned sink logits).

        ``window="layers"``: each layer with a sliding window gets a cache keeping that window (after
        ``sinks`` first tokens), which decodes to the logits of the full forward in constant memory; the
        other layers get caches that keep every key (``capacity``).
        """
        if not self.blocks[0].attention.causal:
            raise ValueError(
                "a bidirectional encoder cannot decode incrementally (each token attends to later ones): "
                "KV caches need a causal model (TransformerLM)"
            )
        if window == "layers":
            caches = [
                KVCache(capacity)
                if block.attention.window is None
                else KVCache(sinks=sinks, window=block.attention.window)
                for block in self.blocks
            ]
        elif isinstance(window, str):
            raise ValueError(f'window must be a number of tokens, "layers" or None, got {window!r}')
        else:
            caches = [KVCache(capacity, sinks=sinks, window=window) for _ in self.blocks]
        self._check_caches(caches)
        return caches

    def _check_caches(self, caches: list[KVCache] | None) -> None:
        """One cache of its own per layer, each usable by every layer (see :meth:`_check_cache`)."""
        if caches is None:
            return
        if not isinstance(caches, list | tuple) or len(caches) != len(self.blocks):
            given = f"{len(caches)} caches" if isinstance(caches, list | tuple) else type(caches).__name__
            raise ValueError(
                f"caches must be a list of one KVCache per layer ({len(self.blocks)}), got {given}"
            )
        if len({id(cache) for cache in caches}) != len(caches):
            raise ValueError(
                "caches must be one KVCache per layer, each its own: the same cache appears more than once "
                "(make them with model.new_caches(), not [KVCache()] * n_layers)"
            )
        for cache, block in zip(caches, self.blocks, strict=True):
            block.attention.check_cache(cache)
            self._check_cache(cache, self.encoding)
            self._check_cache(cache, block.attention.encoding)

    def _check_cache(self, cache: KVCache | None, encoding: PositionalEncoding) -> None:
        """A cache whose positions move (sinks and a window) only for an encoding that follows them."""
        if cache is not None and cache.positions_move and not encoding.capabilities.follows_moving_positions:
            raise ValueError(
                f"{type(encoding).__name__} adds its position codes to the token embeddings, which every "
                "cached key keeps from the place it entered at: a cache keeping sinks and a window needs an "
                "encoding that reads positions in attention (RoPE, a bias)"
            )

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens ``[b, s]`` -> logits ``[b, s, vocab]``.

        positions: ``[s]`` or ``[b, s]``, or coordinates ``[s, n]`` / ``[b, s, n]`` for an encoding on n
            axes (default: continue the caches, else 0 … s−1, on every axis).
        caches: from :meth:`new_caches`; each call appends its keys and values.
        documents: ``[s]`` or ``[b, s]`` ids of documents packed one after another in a row
            (:func:`posenc.attention.document_ids`): each token attends only to its own document. Give
            each document its own positions (restarting at 0); then each gets what it gets alone.
        """
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape [b, s], got {tuple(tokens.shape)}")
        check_token_ids(tokens, self.vocab_size)
        x = self.token_embedding(tokens) * self.embedding_scale  # [b, s, d − added]
        self._check_caches(caches)
        cache = caches[0] if caches else None
        if positions is None and cache is None and self.random_positions is not None:
            positions = randomized_positions(
                tokens.shape[0], tokens.shape[1], self.random_positions, device=tokens.device
            )
        columns = self.encoding.position_space.columns
        given = positions
        positions = continued_positions(positions, x, cache, columns)  # once for all layers
        documents = document_ids(documents, x, cache)  # checked once for all layers
        x = self.encoding.embed(x, positions)  # [b, s, d]
        for index, block in enumerate(self.blocks):
            layer_cache = caches[index] if caches else None
            layer_positions = positions
            if layer_cache is not None and layer_cache.positions_move != cache.positions_move:
                # caches of two kinds (window="layers"): places in a sink cache, else places in the text
                layer_positions = continued_positions(given, x, layer_cache, columns)
            x = block(x, layer_positions, layer_cache, documents)
        return self.head(self.norm(x))


def _check_columns(encoding: PositionalEncoding, encodings: list[PositionalEncoding]) -> None:
    """Every layer reads positions of the same shape: one axis, or the same coordinates."""
    for index, layer_encoding in enumerate(encodings):
        if layer_encoding.position_space.columns != encoding.position_space.columns:
            raise ValueError(
                f"layer {index}'s encoding {type(layer_encoding).__name__} takes {layer_encoding.position_space.columns} "
                f"position columns, the model's {type(encoding).__name__} {encoding.position_space.columns}: the layers "
                "of a stack read the same positions"
            )


class TransformerEncoder(TransformerLM):
    """Bidirectional encoder (every token attends to every token): per-token logits ``[b, s, vocab]``."""

    def __init__(self, vocab_size: int, **kwargs) -> None:
        if kwargs.pop("causal", False):
            raise ValueError("TransformerEncoder is bidirectional; use TransformerLM for causal attention")
        super().__init__(vocab_size, causal=False, **kwargs)
