"""Registered positional encodings: ``register(name, cls)``, ``build(name, **kwargs)`` and ``available()``.

Adding an encoding is one file (its class, acting through the hooks of ``posenc.encodings.base``, and what
posenc says about it, a ``Description``) and one ``register`` line, here for posenc's own or anywhere for
a user's. ``describe(name)`` gives the description back.
"""

from __future__ import annotations

import re

from posenc import plugins
from posenc.encodings.additive import AdditiveEncoding
from posenc.encodings.base import KINDS, VIEWS, PositionalEncoding, constructor_arguments, resolve_positions
from posenc.encodings.bias import (
    ALIBI_DESCRIPTION,
    SWIN_DESCRIPTION,
    T5_DESCRIPTION,
    ALiBi,
    BiasEncoding,
    SwinRelativeBias,
    T5RelativeBias,
)
from posenc.encodings.comrope import DESCRIPTION as COMROPE_DESCRIPTION
from posenc.encodings.comrope import ComRoPE
from posenc.encodings.cope import DESCRIPTION as COPE_DESCRIPTION
from posenc.encodings.cope import ContextualPositionEncoding
from posenc.encodings.deberta import DESCRIPTION as DEBERTA_DESCRIPTION
from posenc.encodings.deberta import DisentangledAttention
from posenc.encodings.description import Description, SeedRow, declared_by
from posenc.encodings.fire import DESCRIPTION as FIRE_DESCRIPTION
from posenc.encodings.fire import FIRE
from posenc.encodings.fope import DESCRIPTION as FOPE_DESCRIPTION
from posenc.encodings.fope import FourierEncoding
from posenc.encodings.forgetting import DESCRIPTION as FORGETTING_DESCRIPTION
from posenc.encodings.forgetting import ForgettingTransformer
from posenc.encodings.golden_gate import DESCRIPTION as GOLDEN_GATE_DESCRIPTION
from posenc.encodings.golden_gate import GoldenGateRoPE
from posenc.encodings.kerple import DESCRIPTION as KERPLE_DESCRIPTION
from posenc.encodings.kerple import Kerple
from posenc.encodings.learned import DESCRIPTION as LEARNED_DESCRIPTION
from posenc.encodings.learned import LearnedEncoding
from posenc.encodings.liere import DESCRIPTION as LIERE_DESCRIPTION
from posenc.encodings.liere import LieRE
from posenc.encodings.mochi import DESCRIPTION as MOCHI_DESCRIPTION
from posenc.encodings.mochi import MochiRoPE
from posenc.encodings.nope import DESCRIPTION as NOPE_DESCRIPTION
from posenc.encodings.nope import NoPE
from posenc.encodings.path import DESCRIPTION as PATH_DESCRIPTION
from posenc.encodings.path import PaTH
from posenc.encodings.pope import DESCRIPTION as POPE_DESCRIPTION
from posenc.encodings.pope import PolarEncoding
from posenc.encodings.rope import DESCRIPTION as ROPE_DESCRIPTION
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.rope_axes import (
    AXIAL_DESCRIPTION,
    MROPE_DESCRIPTION,
    ROPE_MIXED_DESCRIPTION,
    AxialRotaryEncoding,
    MixedRotaryEncoding,
    MultimodalRotaryEncoding,
)
from posenc.encodings.rope_video import (
    ERNIE_DESCRIPTION,
    HOPE_DESCRIPTION,
    VIDEOROPE_DESCRIPTION,
    XDROPE_DESCRIPTION,
    ErnieRotaryEncoding,
    HoPERotaryEncoding,
    VideoRotaryEncoding,
    XDRotaryEncoding,
)
from posenc.encodings.rope_vision import (
    COSMOS_DESCRIPTION,
    DINOV3_DESCRIPTION,
    LTX_DESCRIPTION,
    CosmosRotaryEncoding,
    DinoV3RotaryEncoding,
    LTXRotaryEncoding,
)
from posenc.encodings.sandwich import DESCRIPTION as SANDWICH_DESCRIPTION
from posenc.encodings.sandwich import Sandwich
from posenc.encodings.shaw import DESCRIPTION as SHAW_DESCRIPTION
from posenc.encodings.shaw import ShawRelativePosition
from posenc.encodings.sinusoidal import (
    SINUSOIDAL_DESCRIPTION,
    SINUSOIDAL_GRID_DESCRIPTION,
    SinusoidalEncoding,
    SinusoidalGridEncoding,
)
from posenc.encodings.stick_breaking import DESCRIPTION as STICK_BREAKING_DESCRIPTION
from posenc.encodings.stick_breaking import StickBreaking
from posenc.encodings.string import DESCRIPTION as STRING_DESCRIPTION
from posenc.encodings.string import STRING
from posenc.encodings.swin_v2 import DESCRIPTION as SWIN_V2_DESCRIPTION
from posenc.encodings.swin_v2 import ContinuousPositionBias
from posenc.encodings.transformer_xl import DESCRIPTION as TRANSFORMER_XL_DESCRIPTION
from posenc.encodings.transformer_xl import TransformerXLRelative

#: name -> encoding class, filled by ``register``.
ENCODINGS: dict[str, type[PositionalEncoding]] = {}
#: name -> (the class registered as it, what posenc says about it), filled by ``register``.
_DESCRIPTIONS: dict[str, tuple[type[PositionalEncoding], Description]] = {}
#: class -> the description it was last registered with (what a subclass declaring none inherits).
_DESCRIBED: dict[type[PositionalEncoding], Description] = {}
#: A registered name: lower case letters, digits and underscores (it names files, columns and CLI arguments).
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def register(
    name: str, cls: type[PositionalEncoding], description: Description | None = None
) -> type[PositionalEncoding]:
    """Register ``cls`` as ``name``, described by ``description``: ``build``, ``available``, attention,
    analysis, figures, the report and the lab then know it. Returns ``cls``.

    ``description`` None: the one ``cls`` declares as class attributes of :class:`Description`'s field
    names (``label = …``, ``figures = …``), as plugins written before it do (:func:`describe`).

    Raises:
        TypeError: ``cls`` is not a ``PositionalEncoding`` subclass, or ``description`` not a Description.
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
    if description is None:
        description = declared_by(cls, _DESCRIBED)
    elif not isinstance(description, Description):
        raise TypeError(f"description must be a posenc.encodings.Description, got {description!r}")
    ENCODINGS[name] = cls
    _DESCRIBED[cls] = description = description.of_kind(cls.kind)
    _DESCRIPTIONS[name] = (cls, description)
    plugins.remember_class(cls)  # a class from outside posenc: its errors are its author's to see
    return cls


register("sinusoidal", SinusoidalEncoding, SINUSOIDAL_DESCRIPTION)
register("learned", LearnedEncoding, LEARNED_DESCRIPTION)
register("nope", NoPE, NOPE_DESCRIPTION)
register("rope", RotaryEncoding, ROPE_DESCRIPTION)
register("alibi", ALiBi, ALIBI_DESCRIPTION)
register("t5", T5RelativeBias, T5_DESCRIPTION)
register("swin", SwinRelativeBias, SWIN_DESCRIPTION)
register("sinusoidal_2d", SinusoidalGridEncoding, SINUSOIDAL_GRID_DESCRIPTION)
register("rope_axial", AxialRotaryEncoding, AXIAL_DESCRIPTION)
register("mrope", MultimodalRotaryEncoding, MROPE_DESCRIPTION)
register("rope_mixed", MixedRotaryEncoding, ROPE_MIXED_DESCRIPTION)
register("swin_v2", ContinuousPositionBias, SWIN_V2_DESCRIPTION)
register("cope", ContextualPositionEncoding, COPE_DESCRIPTION)
register("deberta", DisentangledAttention, DEBERTA_DESCRIPTION)
register("shaw", ShawRelativePosition, SHAW_DESCRIPTION)
register("transformer_xl", TransformerXLRelative, TRANSFORMER_XL_DESCRIPTION)
register("fire", FIRE, FIRE_DESCRIPTION)
register("kerple", Kerple, KERPLE_DESCRIPTION)
register("sandwich", Sandwich, SANDWICH_DESCRIPTION)
register("forgetting", ForgettingTransformer, FORGETTING_DESCRIPTION)
register("stick_breaking", StickBreaking, STICK_BREAKING_DESCRIPTION)
register("path", PaTH, PATH_DESCRIPTION)
register("dinov3", DinoV3RotaryEncoding, DINOV3_DESCRIPTION)
register("ltx", LTXRotaryEncoding, LTX_DESCRIPTION)
register("cosmos", CosmosRotaryEncoding, COSMOS_DESCRIPTION)
register("videorope", VideoRotaryEncoding, VIDEOROPE_DESCRIPTION)
register("hope", HoPERotaryEncoding, HOPE_DESCRIPTION)
register("xdrope", XDRotaryEncoding, XDROPE_DESCRIPTION)
register("ernie_3d", ErnieRotaryEncoding, ERNIE_DESCRIPTION)
register("golden_gate", GoldenGateRoPE, GOLDEN_GATE_DESCRIPTION)
register("string", STRING, STRING_DESCRIPTION)
register("liere", LieRE, LIERE_DESCRIPTION)
register("comrope", ComRoPE, COMROPE_DESCRIPTION)
register("mochi", MochiRoPE, MOCHI_DESCRIPTION)
register("pope", PolarEncoding, POPE_DESCRIPTION)
register("fope", FourierEncoding, FOPE_DESCRIPTION)


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


def describe(encoding: str | type[PositionalEncoding] | PositionalEncoding) -> Description:
    """What posenc says about an encoding: the description of the one registered as ``encoding`` (a name),
    or of a class or instance: the description its class was registered with, else the one it declares
    as class attributes (an unregistered class, e.g. one built for a test).

    Raises:
        ValueError: an unknown name (lists the registered ones).
    """
    if isinstance(encoding, str):
        cls = encoding_class(encoding)  # loads the plugins' entry points, or names the registered ones
        registered, description = _DESCRIPTIONS.get(encoding, (None, None))
        if registered is cls:
            return description
    else:
        cls = encoding if isinstance(encoding, type) else type(encoding)
    return _DESCRIBED[cls] if cls in _DESCRIBED else declared_by(cls, _DESCRIBED)


def build(name: str, **kwargs) -> PositionalEncoding:
    """Build the encoding registered as ``name`` with its keyword arguments.

    >>> build("sinusoidal", d_model=64, mode="concat")
    SinusoidalEncoding(d_model=64, mode='concat', base=10000.0)

    Raises:
        ValueError: unknown name (the message lists the registered ones), or arguments
            the encoding does not take (the message lists those it does).
    """
    cls = encoding_class(name)
    accepted = constructor_arguments(cls)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no arguments"
        raise ValueError(f"encoding {name!r} does not take {', '.join(unknown)}; it takes {takes}")
    return cls(**kwargs)


__all__ = [
    "ALiBi",
    "AxialRotaryEncoding",
    "ContinuousPositionBias",
    "Description",
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
    "describe",
    "encoding_class",
    "register",
    "resolve_positions",
]
