"""Per-layer attention: what each layer of a stack takes (its encoding, mask, sinks, query temperature and
the shape of its logits: QK-norm, Gemma's query pre-attention scalar, a soft cap).

Models of 2025-26 mix layers: NoPE every fourth layer among RoPE ones (Llama 4's ``no_rope_layers``,
SmolLM3's ``no_rope_layer_interval``; Yang et al. 2025, arXiv 2501.18795), sliding-window RoPE layers
around global NoPE ones (Command A; SWAN-GPT, arXiv 2504.08719), local and global layers of different
bases (Gemma 3), learned sinks in alternating sliding-window layers (GPT-OSS). A :class:`LayerSpec`
declares one layer; :func:`pattern` repeats a string of letters over the layers::

    TransformerLM(V, n_layers=8, layers=pattern("RRRN", R=layer("rope"), N=layer("nope")))

and :func:`layer_specs` turns what ``TransformerLM(layers=...)`` takes into one spec per layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from posenc.encodings import PositionalEncoding
from posenc.logits import check_query_pre_attn_scalar, check_softcap
from posenc.masks import check_span
from posenc.qk_norm import QKNorm, check_qk_norm
from posenc.temperature import QueryTemperature, check_temperature


@dataclass(frozen=True, eq=False)
class LayerSpec:
    """One attention layer of a stack.

    Attributes:
        encoding: a registered name, an instance, or None for the model's own ``encoding``.
        encoding_kwargs: arguments for an encoding built by name, over those the model's sizes give
            (``base``, ``scaling``, ``factor`` …).
        window: sliding window in tokens (transformers' ``sliding_window``), None: every key.
        chunk: chunked attention in tokens (Llama 4's ``attention_chunk_size``), None: no chunks.
        sinks: learned sink logits (GPT-OSS's ``sinks``): True (zeros), the initial logits ``[h]``, or False.
        temperature: a query temperature (:mod:`posenc.temperature`), None: none.
        qk_norm: an RMSNorm of each query and key head (:class:`posenc.qk_norm.QKNorm`), None: none.
        query_pre_attn_scalar: logits q·kᵀ·n^(−½) for this n (Gemma's), None: d_head (:mod:`posenc.logits`).
        softcap: logits c·tanh(z / c) (Gemma 2's ``attn_logit_softcapping``; eager and flex), None: none.
    """

    encoding: str | PositionalEncoding | None = None
    encoding_kwargs: Mapping[str, object] = field(default_factory=dict)
    window: int | None = None
    chunk: int | None = None
    sinks: bool | torch.Tensor | tuple = False
    temperature: QueryTemperature | None = None
    qk_norm: QKNorm | None = None
    query_pre_attn_scalar: float | None = None
    softcap: float | None = None

    def __post_init__(self) -> None:
        if self.encoding is not None and not isinstance(self.encoding, str | PositionalEncoding):
            raise TypeError(
                f"a layer's encoding must be a registered name, a PositionalEncoding or None, got {self.encoding!r}"
            )
        if isinstance(self.encoding, PositionalEncoding) and self.encoding_kwargs:
            raise ValueError(
                f"encoding arguments {sorted(self.encoding_kwargs)} apply to an encoding given by name, not to "
                f"an instance ({type(self.encoding).__name__})"
            )
        check_span("window", self.window)
        check_span("chunk", self.chunk)
        check_temperature(self.temperature)
        check_qk_norm(self.qk_norm)
        check_query_pre_attn_scalar(self.query_pre_attn_scalar)
        check_softcap(self.softcap)
        if not isinstance(self.sinks, bool | torch.Tensor | list | tuple):
            raise TypeError(f"sinks must be a bool or one logit per head, got {self.sinks!r}")

    def attention_arguments(self) -> dict:
        """The keyword arguments of :class:`posenc.attention.MultiHeadAttention` this layer sets."""
        return {
            "window": self.window,
            "chunk": self.chunk,
            "sinks": self.sinks,
            "temperature": self.temperature,
            "qk_norm": self.qk_norm,
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
            "softcap": self.softcap,
        }

    def __repr__(self) -> str:
        parts = [repr(self.encoding)] if self.encoding is not None else []
        parts += [f"{name}={value!r}" for name, value in self.encoding_kwargs.items()]
        defaults = LayerSpec()
        for name in (
            "window",
            "chunk",
            "sinks",
            "temperature",
            "qk_norm",
            "query_pre_attn_scalar",
            "softcap",
        ):
            value = getattr(self, name)
            if value is not getattr(defaults, name):
                parts.append(f"{name}={value!r}")
        return f"layer({', '.join(parts)})"


def layer(
    encoding: str | PositionalEncoding | None = None,
    *,
    window: int | None = None,
    chunk: int | None = None,
    sinks: bool | torch.Tensor | tuple = False,
    temperature: QueryTemperature | None = None,
    qk_norm: QKNorm | None = None,
    query_pre_attn_scalar: float | None = None,
    softcap: float | None = None,
    **encoding_kwargs,
) -> LayerSpec:
    """A :class:`LayerSpec`, the encoding's own arguments given as keywords:
    ``layer("rope", base=1e6, scaling="linear", factor=8.0, window=None)``."""
    return LayerSpec(
        encoding,
        dict(encoding_kwargs),
        window,
        chunk,
        sinks,
        temperature,
        qk_norm=qk_norm,
        query_pre_attn_scalar=query_pre_attn_scalar,
        softcap=softcap,
    )


@dataclass(frozen=True, eq=False)
class Pattern:
    """Letters, one per layer, repeated over the stack; each letter names a :class:`LayerSpec`."""

    letters: str
    specs: Mapping[str, LayerSpec]

    def __post_init__(self) -> None:
        if not isinstance(self.letters, str) or not self.letters:
            raise ValueError(f"a pattern must be a non-empty string of letters, got {self.letters!r}")
        for letter, spec in self.specs.items():
            if not isinstance(spec, LayerSpec):
                raise TypeError(f"pattern letter {letter!r} must name a LayerSpec (layer(...)), got {spec!r}")
        unknown = sorted(set(self.letters) - set(self.specs))
        if unknown:
            raise ValueError(
                f"pattern {self.letters!r} uses {unknown} with no layer given for them (given: {sorted(self.specs)})"
            )
        unused = sorted(set(self.specs) - set(self.letters))
        if unused:
            raise ValueError(f"pattern {self.letters!r} never uses the layers given for {unused}")

    def expand(self, n_layers: int) -> list[LayerSpec]:
        """One spec per layer: the letters repeated a whole number of times over ``n_layers``.

        Raises:
            ValueError: a pattern longer than the stack, or one whose length does not divide ``n_layers``
                (write a stack whose last repetition is cut short in full: ``"LLLLLG" * 4 + "LL"``).
        """
        size = len(self.letters)
        if size > n_layers or n_layers % size:
            raise ValueError(
                f"pattern {self.letters!r} ({size} layers) does not cover n_layers={n_layers} a whole number of "
                f"times; give one letter per layer where the last repetition is cut short"
            )
        return [self.specs[letter] for letter in self.letters * (n_layers // size)]


def pattern(letters: str, **specs: LayerSpec) -> Pattern:
    """``pattern("RRRN", R=layer("rope"), N=layer("nope"))``: the letters repeated over the layers."""
    return Pattern(letters, specs)


def layer_specs(layers: object, n_layers: int) -> list[LayerSpec] | None:
    """One :class:`LayerSpec` per layer from what ``TransformerLM(layers=...)`` takes: None (every layer
    the model's encoding, no mask: None back), one ``LayerSpec`` for every layer, a :class:`Pattern`, or
    a list of one ``LayerSpec`` (or encoding name or instance) per layer.

    Raises:
        ValueError: a list whose length is not ``n_layers``, a pattern that does not cover them.
        TypeError: anything else.
    """
    if layers is None:
        return None
    if isinstance(layers, LayerSpec):
        return [layers] * n_layers
    if isinstance(layers, Pattern):
        return layers.expand(n_layers)
    if isinstance(layers, str):
        raise TypeError(
            f"layers={layers!r}: a pattern's letters need their layers, pattern({layers!r}, R=layer(...), ...)"
        )
    if isinstance(layers, list | tuple):
        if len(layers) != n_layers:
            raise ValueError(f"layers gives {len(layers)} layers for n_layers={n_layers}: give one per layer")
        return [_as_spec(item, index) for index, item in enumerate(layers)]
    raise TypeError(
        f"layers must be a LayerSpec, a pattern or a list of one per layer, got {type(layers).__name__}"
    )


def _as_spec(item: object, index: int) -> LayerSpec:
    if isinstance(item, LayerSpec):
        return item
    if isinstance(item, str | PositionalEncoding):
        return LayerSpec(item)
    raise TypeError(f"layer {index} must be a LayerSpec, an encoding name or instance, got {item!r}")
