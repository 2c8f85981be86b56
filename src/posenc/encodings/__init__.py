"""Registered positional encodings: ``register(name, cls)``, ``build(name, **kwargs)`` and ``available()``.

Adding an encoding is one file (its class, describing itself: see ``posenc.encodings.base``) and one
``register`` line, here for posenc's own or anywhere for a user's.
"""

from __future__ import annotations

import re

from posenc import plugins
from posenc.encodings.additive import AdditiveEncoding
from posenc.encodings.base import KINDS, VIEWS, PositionalEncoding, SeedRow, resolve_positions
from posenc.encodings.bias import ALiBi, BiasEncoding, SwinRelativeBias, T5RelativeBias
from posenc.encodings.cope import ContextualPositionEncoding
from posenc.encodings.deberta import DisentangledAttention
from posenc.encodings.fire import FIRE
from posenc.encodings.kerple import Kerple
from posenc.encodings.learned import LearnedEncoding
from posenc.encodings.nope import NoPE
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.rope_axes import AxialRotaryEncoding, MixedRotaryEncoding, MultimodalRotaryEncoding
from posenc.encodings.sandwich import Sandwich
from posenc.encodings.shaw import ShawRelativePosition
from posenc.encodings.sinusoidal import SinusoidalEncoding, SinusoidalGridEncoding
from posenc.encodings.swin_v2 import ContinuousPositionBias
from posenc.encodings.transformer_xl import TransformerXLRelative

#: name -> encoding class, filled by ``register``.
ENCODINGS: dict[str, type[PositionalEncoding]] = {}
#: A registered name: lower case letters, digits and underscores (it names files, columns and CLI arguments).
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def register(name: str, cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
    """Register ``cls`` as ``name``: ``build``, ``available``, attention, analysis, figures, the report and
    the lab then know it. Returns ``cls``.

    Raises:
        TypeError: ``cls`` is not a ``PositionalEncoding`` subclass.
        ValueError: a name that is not lower-case letters, digits and underscores, one already taken by
            another class, a ``kind`` outside KINDS, or declared ``views`` that are not a set of VIEWS.
    """
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise TypeError(f"cls must be a PositionalEncoding subclass, got {cls!r}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"an encoding name is lower-case letters, digits and underscores, got {name!r}")
    if ENCODINGS.get(name, cls) is not cls:
        raise ValueError(f"encoding name {name!r} is taken by {ENCODINGS[name].__name__}")
    if cls.kind not in KINDS:
        raise ValueError(f"{cls.__name__}.kind must be one of {', '.join(KINDS)}, got {cls.kind!r}")
    views = cls.views  # a class attribute, or the property of an encoding whose views follow its settings
    if not isinstance(views, property) and not (isinstance(views, frozenset | set) and views <= set(VIEWS)):
        raise ValueError(f"{cls.__name__}.views must be a set of {', '.join(VIEWS)}, got {views!r}")
    ENCODINGS[name] = cls
    plugins.remember_class(cls)  # a class from outside posenc: its errors are its author's to see
    return cls


register("sinusoidal", SinusoidalEncoding)
register("learned", LearnedEncoding)
register("nope", NoPE)
register("rope", RotaryEncoding)
register("alibi", ALiBi)
register("t5", T5RelativeBias)
register("swin", SwinRelativeBias)
register("sinusoidal_2d", SinusoidalGridEncoding)
register("rope_axial", AxialRotaryEncoding)
register("mrope", MultimodalRotaryEncoding)
register("rope_mixed", MixedRotaryEncoding)
register("swin_v2", ContinuousPositionBias)
register("cope", ContextualPositionEncoding)
register("deberta", DisentangledAttention)
register("shaw", ShawRelativePosition)
register("transformer_xl", TransformerXLRelative)
register("fire", FIRE)
register("kerple", Kerple)
register("sandwich", Sandwich)


def available() -> list[str]:
    """Names of the registered encodings, sorted (installed plugins' entry points included)."""
    plugins.load_entry_points()
    return sorted(ENCODINGS)


def encoding_class(name: str) -> type[PositionalEncoding]:
    """The class registered as ``name``; a ValueError listing the valid names otherwise."""
    if name not in ENCODINGS:
        plugins.load_entry_points()
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
    accepted = cls.arguments()
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no arguments"
        raise ValueError(f"encoding {name!r} does not take {', '.join(unknown)}; it takes {takes}")
    return cls(**kwargs)


__all__ = [
    "ALiBi",
    "AxialRotaryEncoding",
    "ContinuousPositionBias",
    "MixedRotaryEncoding",
    "MultimodalRotaryEncoding",
    "SinusoidalGridEncoding",
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
    "SeedRow",
    "SinusoidalEncoding",
    "VIEWS",
    "available",
    "build",
    "encoding_class",
    "register",
    "resolve_positions",
]
