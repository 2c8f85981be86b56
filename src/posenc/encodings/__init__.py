"""Registered positional encodings: ``build(name, **kwargs)`` and ``available()``."""

from __future__ import annotations

import inspect

from posenc.encodings.additive import AdditiveEncoding
from posenc.encodings.base import KINDS, PositionalEncoding, resolve_positions
from posenc.encodings.bias import ALiBi, BiasEncoding, SwinRelativeBias, T5RelativeBias
from posenc.encodings.learned import LearnedEncoding
from posenc.encodings.nope import NoPE
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.sinusoidal import SinusoidalEncoding

#: name -> encoding class; filled explicitly, one line per encoding.
ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "sinusoidal": SinusoidalEncoding,
    "learned": LearnedEncoding,
    "nope": NoPE,
    "rope": RotaryEncoding,
    "alibi": ALiBi,
    "t5": T5RelativeBias,
    "swin": SwinRelativeBias,
}


def available() -> list[str]:
    """Names of the registered encodings, sorted."""
    return sorted(ENCODINGS)


def encoding_class(name: str) -> type[PositionalEncoding]:
    """The class registered as ``name``; a ValueError listing the valid names otherwise."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; available: {', '.join(available())}")
    return ENCODINGS[name]


def build(name: str, **kwargs) -> PositionalEncoding:
    """Build the encoding registered as ``name`` with its keyword arguments.

    >>> build("sinusoidal", d_model=64, mode="concat")
    SinusoidalEncoding(d_model=64, mode='concat', base=10000.0)

    Raises:
        ValueError: unknown name (the message lists the registered ones), or arguments
            the encoding does not take (the message lists those it does).
    """
    cls = encoding_class(name)
    signature = inspect.signature(cls.__init__).parameters.values()
    accepted = [
        p.name for p in signature if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no arguments"
        raise ValueError(f"encoding {name!r} does not take {', '.join(unknown)}; it takes {takes}")
    return cls(**kwargs)


__all__ = [
    "ALiBi",
    "BiasEncoding",
    "ENCODINGS",
    "SwinRelativeBias",
    "T5RelativeBias",
    "KINDS",
    "AdditiveEncoding",
    "LearnedEncoding",
    "NoPE",
    "PositionalEncoding",
    "RotaryEncoding",
    "SinusoidalEncoding",
    "available",
    "build",
    "encoding_class",
    "resolve_positions",
]
